"""``manage.py activity_backfill``: seed last seen from ``last_login`` for the users already there,
and rebuild the groups' membership bitmaps from the database."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import FieldDoesNotExist
from django.core.management.base import CommandError, CommandParser

from activity.management.base import JobCommand, counted
from activity.services import backfill, groups

MAX_BATCH = 10_000


class Command(JobCommand):
    help = (
        "Seed each user's last seen from the user model's last_login, in batches. A newer last seen "
        "(the user came back since) is never moved back; seeds each user's first active day (retention "
        "cohorts): the earlier of last_login and the activity row's first_seen; then rebuilds each group's "
        "membership bitmap (the members-active counts) from the database. Safe to interrupt and to run again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--batch-size", type=int, default=1000, help=f"Users per batch, 1..{MAX_BATCH}.")

    def handle(self, *args: Any, **options: Any) -> None:
        size = options["batch_size"]
        if not 1 <= size <= MAX_BATCH:
            raise CommandError(f"--batch-size must be between 1 and {MAX_BATCH}, not {size}.")
        try:
            get_user_model()._meta.get_field("last_login")
        except FieldDoesNotExist:
            raise CommandError("The user model has no last_login field: there is nothing to seed from.") from None
        total = backfill.users_to_seed().count()
        with self.progress(total, "users") as progress, progress.following(backfill.batch_seeded, "size"):
            try:
                result = backfill.backfill(batch_size=size)
            except KeyboardInterrupt:
                raise self.interrupted(f"{progress.done} of {total} users seeded") from None
        self.stdout.write(
            f"activity_backfill: {counted(result.users, 'user')} with a last login read in "
            f"{counted(result.batches, 'batch', 'batches')}: {result.moved} last seen moved forward, "
            f"{result.kept} already as new or newer (kept), {result.skipped} skipped; "
            f"{result.first_days} first active days new or moved back."
        )
        rebuilt = groups.rebuild_memberships()
        self.stdout.write(
            f"activity_backfill: {counted(rebuilt.groups, 'group')} rebuilt, "
            f"{counted(rebuilt.bits, 'membership')} with a bit."
        )
