"""``manage.py activity_upgrade``: move what an earlier release kept in Redis into this release's layout."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from activity.errors import StoreUnavailable
from activity.services import funnels, last_seen, sessions


class Command(BaseCommand):
    help = (
        "Move last seen (and its unflushed changes) kept under an earlier release's one set, or in "
        "partitions no longer a member's, into its partition of ACTIVITY_LAST_SEEN_PARTITIONS. Run it once "
        "every process runs the new release or the new count; fold an earlier release's per-user "
        "display names and view counters into the users' views hashes, and move the sessions, linked visitors, "
        "sessions started and transitions an earlier release kept under {pv} into {ses}, the page counts it "
        "kept under {pv} into the partitions of the paths, and each person's funnel "
        "progress kept in a key of its own into its partition's generation. Safe to interrupt and "
        "to run again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--step", type=int, default=1000, help="members read per step (default 1000)")

    def handle(self, *args: Any, step: int, **options: Any) -> None:
        if step < 1:
            raise CommandError("--step must be at least 1")

        def progress(moved: int) -> None:
            self.stdout.write(f"moved {moved} members so far")

        try:
            moved = last_seen.upgrade(step, progress if options["verbosity"] > 1 else None)
            folded, moved_sessions, page_days = sessions.upgrade(step)
            moved_states = funnels.upgrade(step)
        except RuntimeError as error:
            raise CommandError(str(error)) from error
        except StoreUnavailable as error:
            raise CommandError(f"Redis cannot serve now ({error}); nothing is lost, run the command again") from error
        self.stdout.write(self.style.SUCCESS(f"moved {moved} last-seen members into this release's partitions"))
        self.stdout.write(self.style.SUCCESS(f"folded {folded} display names and view counters into views hashes"))
        self.stdout.write(self.style.SUCCESS(f"moved {moved_sessions} session keys from {{pv}} into {{ses}}"))
        self.stdout.write(self.style.SUCCESS(f"folded {page_days} days of page counts into the path partitions"))
        self.stdout.write(self.style.SUCCESS(f"moved {moved_states} funnel states into their generations"))
