"""Scheduled upkeep: flush last seen to the database, prune old members, sweep stray keys.

Each task runs under its job lock (two workers or two beat instances never run one job at once),
skips when the job is busy, is idempotent, and ends before its lock can expire (time limits below
the lock TTL). The result records who ran and when, for logs and for the tests' overlap check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from celery import Task, shared_task

from activity import clock, locks
from activity import flush as flush_service
from activity import prune as prune_service
from activity import sweep as sweep_service
from activity.tasks import retries

SOFT_TIME_LIMIT, TIME_LIMIT = locks.job_time_limits()
JOB_OPTIONS: dict[str, Any] = {
    **retries.while_redis_is_away(max_retries=3, backoff_max=600),
    "soft_time_limit": SOFT_TIME_LIMIT,
    "time_limit": TIME_LIMIT,
    "bind": True,
}


def run_exclusive(task: Task, job: str, body: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``body`` under the job's lock; a busy lock means another run has it: skip."""
    worker = task.request.hostname
    with locks.exclusive_job(job) as acquired:
        if not acquired:
            return {"job": job, "ran": False, "worker": worker}
        started = clock.now()
        outcome = body()
        finished = clock.now()
    return {"job": job, "ran": True, "worker": worker, "started": started, "finished": finished, **outcome}


@shared_task(name="activity.flush", **JOB_OPTIONS)
def flush(self: Task) -> dict[str, Any]:
    """Write last-seen changes to the database (every ``ACTIVITY_FLUSH_INTERVAL`` seconds)."""
    return run_exclusive(self, "flush", lambda: asdict(flush_service.flush()))


@shared_task(name="activity.prune", **JOB_OPTIONS)
def prune(self: Task) -> dict[str, Any]:
    """Drop last-seen members older than ``ACTIVITY_LAST_SEEN_RETENTION`` (never unflushed ones)."""

    def body() -> dict[str, Any]:
        removed, kept = prune_service.prune()
        return {"removed": removed, "kept_unflushed": kept}

    return run_exclusive(self, "prune", body)


@shared_task(name="activity.sweep", **JOB_OPTIONS)
def sweep(self: Task) -> dict[str, Any]:
    """Find keys under the prefix without a TTL and repair or delete them."""
    return run_exclusive(self, "sweep", lambda: asdict(sweep_service.sweep()))
