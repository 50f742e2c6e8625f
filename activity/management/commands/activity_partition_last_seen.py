"""``manage.py activity_partition_last_seen``: carry existing last-seen data into the partitions."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from activity.errors import StoreUnavailable
from activity.services import last_seen


class Command(BaseCommand):
    help = (
        "Move last seen (and its unflushed changes) from the unpartitioned keys into the "
        "ACTIVITY_LAST_SEEN_PARTITIONS partitions. Run it once every process runs with the new "
        "setting; safe to interrupt and to run again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--step", type=int, default=1000, help="members moved per step (default 1000)")

    def handle(self, *args: Any, step: int, **options: Any) -> None:
        if step < 1:
            raise CommandError("--step must be at least 1")

        def progress(moved: int) -> None:
            self.stdout.write(f"moved {moved} members so far")

        try:
            moved = last_seen.migrate(step, progress if options["verbosity"] > 1 else None)
        except (ValueError, RuntimeError) as error:
            raise CommandError(str(error)) from error
        except StoreUnavailable as error:
            raise CommandError(f"Redis cannot serve now ({error}); nothing is lost, run the command again") from error
        self.stdout.write(self.style.SUCCESS(f"moved {moved} members into the last-seen partitions"))
