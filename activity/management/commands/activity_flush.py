"""``manage.py activity_flush``: write the last-seen changes waiting in Redis to the database now."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import CommandError

from activity.management.base import JobCommand, counted
from activity.services import flush, locks


class Command(JobCommand):
    help = (
        "Run the flush now, under the flush job's lock, until the changes waiting when it started are "
        "written; report rows written. Interrupted, it hands its claims back, so a rerun writes them."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        backlog = flush.status().backlog
        written = batches = reaped = waiting = 0
        lock_deadline = time.monotonic() + locks.job_ttl("flush")
        with self.progress(backlog, "users") as progress, progress.following(flush.batch_claimed, "size"):
            try:
                while True:
                    with locks.exclusive_job("flush") as acquired:
                        if acquired:
                            result = self._run_holding_lock()
                    if not acquired:  # a scheduled flush is running: wait for its release, then go on
                        if time.monotonic() > lock_deadline:
                            raise CommandError("another flush has held the flush lock all along; try again later.")
                        locks.wait_for_job("flush", 1.0)
                        continue
                    written += result.flushed
                    batches += result.batches
                    reaped += result.reaped
                    waiting = result.remaining
                    if waiting == 0 or written >= backlog:
                        break
            except KeyboardInterrupt:
                raise self.interrupted(
                    f"{progress.done} of {backlog} changes taken, those unwritten handed back"
                ) from None
        self.stdout.write(
            f"activity_flush: {counted(written, 'row')} written in {counted(batches, 'batch', 'batches')}; "
            f"{counted(reaped, 'stale claim')} handed back; {counted(waiting, 'change')} waiting."
        )

    @staticmethod
    def _run_holding_lock() -> flush.FlushResult:
        try:
            return flush.flush()
        except KeyboardInterrupt:
            flush.reap_stale_claims(age=0)  # still under the lock: these claims are this run's own
            raise
