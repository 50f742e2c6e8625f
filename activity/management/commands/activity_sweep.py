"""``manage.py activity_sweep [--dry-run]``: find keys of ours without a TTL and repair them."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from activity.management.base import JobCommand, counted
from activity.services import sweep


class Command(JobCommand):
    help = (
        "SCAN the service's key prefix and give keys found without a TTL their family's TTL (or delete "
        "them), as the scheduled sweep does. Each repair is atomic, so it may run beside the scheduled one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        parser.add_argument("--dry-run", action="store_true", help="Change nothing; report what would be done.")
        parser.add_argument("--count", type=int, default=200, help="SCAN COUNT: keys looked at per step, 10..10000.")

    def handle(self, *args: Any, **options: Any) -> None:
        count, dry_run = options["count"], options["dry_run"]
        if not 10 <= count <= 10_000:
            raise CommandError(f"--count must be between 10 and 10000, not {count}.")
        with self.progress(sweep.steps_expected(count), "steps") as progress, progress.following(sweep.step_swept):
            try:
                result = sweep.sweep(count=count, dry_run=dry_run)
            except KeyboardInterrupt:
                raise self.interrupted(f"{progress.done} SCAN steps done") from None
        if dry_run:
            outcome = (
                f"{result.repaired} would get a TTL, {result.deleted} would be deleted, {result.merged} legacy"
                " first-visit hashes would be merged (dry run: nothing changed)"
            )
        else:
            outcome = (
                f"{result.repaired} given a TTL, {result.deleted} deleted,"
                f" {result.merged} legacy first-visit hashes merged"
            )
        self.stdout.write(
            f"activity_sweep: {counted(result.scanned, 'key')} of ours scanned "
            f"({result.long_lived} long-lived, left alone); {outcome}."
        )
