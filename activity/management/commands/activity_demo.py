"""``manage.py activity_demo``: a month of believable traffic for a fresh install, through the
service's own write path (``activity.services.demo``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.urls import reverse

from activity import conf
from activity.management.base import INTERRUPTED, JobCommand, counted
from activity.services import demo


class Command(JobCommand):
    help = (
        "Fill a fresh install with demonstration traffic: users (demo.*, who cannot sign in), groups, two "
        "API tokens, page views, anonymous visitors, bots and API calls over the last --days days, then the "
        "flush and the past days' rollups, the groups' membership bitmaps and fresh cached reports and "
        "retention tables, so the dashboard and the API have something to show. Writes nothing when Redis "
        "cannot serve. A rerun reuses the users and adds its traffic to what is there."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--users", type=int, default=300, help=f"Demo users, 1..{demo.MAX_USERS}.")
        parser.add_argument(
            "--days", type=int, default=demo.MAX_DAYS, help=f"Days, today included, 1..{demo.MAX_DAYS}."
        )
        parser.add_argument("--seed", type=int, default=1, help="The same seed makes the same traffic.")

    def handle(self, *args: Any, **options: Any) -> None:
        users, days, seed = options["users"], options["days"], options["seed"]
        for name, value, most in (("--users", users, demo.MAX_USERS), ("--days", days, demo.MAX_DAYS)):
            if not 1 <= value <= most:
                raise CommandError(f"{name} must be between 1 and {most}, not {value}.")
        with self.progress(days, "days") as progress, progress.following(demo.day_sent):
            try:
                result = demo.fill(users, days, seed)
            except KeyboardInterrupt:
                raise CommandError(
                    f"interrupted after {progress.done} of {days} days; what was sent stays, and a rerun adds to it.",
                    returncode=INTERRUPTED,
                ) from None
        self.stdout.write(
            f"activity_demo: {counted(result.users, 'user')} ({result.new_users} new), "
            f"{counted(result.groups, 'group')} ({counted(result.memberships, 'membership')} in the bitmaps), "
            f"{counted(len(result.tokens), 'API token')} "
            f"({', '.join(result.tokens) or 'rest_framework.authtoken is not installed'}); "
            f"{result.days} days from {result.first_day} (seed {seed}): {counted(result.page_views, 'page view')}, "
            f"{counted(result.visits, 'anonymous request')}, {counted(result.bots, 'bot request')} and "
            f"{counted(result.api_calls, 'API call')} today, {result.browsing} users browsing now; "
            f"{counted(result.flushed, 'row')} flushed, {counted(result.rolled_up, 'day')} rolled up, "
            f"{counted(result.funnels, 'funnel')} defined."
        )
        self.stdout.write(
            f"Page views older than {conf.settings.PAGE_STATS_DAYS} days (ACTIVITY_PAGE_STATS_DAYS) are not "
            "kept, and only the last minute's make sessions: docs/commands.md says why."
        )
        self.stdout.write(
            f"See it at {reverse('admin:activity-dashboard')} as a superuser "
            "(python manage.py createsuperuser makes one; the demo users cannot sign in)."
        )
