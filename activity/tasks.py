"""The app's Celery tasks, thin over the services. ``StoreUnavailable`` is retried with backoff (not
by the report tasks: the next run redoes them), any other error is the task's own; retried tasks are
acknowledged once they ran, so a killed worker's task runs again elsewhere. Each is safe to rerun:
``record_events`` by its task id. Scheduled jobs run under their lock, skip when it is taken, and end
before it expires (docs/scheduled-jobs.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from datetime import date, timedelta
from typing import Any

from celery import Task, shared_task

from activity import calendar, clock
from activity.errors import KeyInUse, StoreUnavailable
from activity.events import clean_events, clean_user
from activity.schedule import REPORT_REFRESH_INTERVAL
from activity.services import audience, idempotency, ingest, locks, privacy, reports
from activity.services import flush as flush_service
from activity.services import last_seen as last_seen_service
from activity.services import sweep as sweep_service


def while_redis_is_away(max_retries: int | None, backoff_max: int = 300) -> dict[str, Any]:
    """``shared_task`` options: retried ``max_retries`` times (None: until Redis is back), waiting
    at most ``backoff_max`` seconds between two tries."""
    return {
        "autoretry_for": (StoreUnavailable,),
        "retry_backoff": True,
        "retry_backoff_max": backoff_max,
        "max_retries": max_retries,
        "acks_late": True,
    }


@shared_task(name="activity.record_events", bind=True, **while_redis_is_away(max_retries=10, backoff_max=60))
def record_events(self: Task, events: list[dict[str, Any]]) -> dict[str, Any]:
    """Record a batch of events (dicts as ``POST /api/v1/events/`` takes them); a bad batch raises
    ``InvalidBatch``, never retried. Idempotent by its task id, as the API by an ``Idempotency-Key``:
    a retry or a redelivery (a reply lost to a timeout, a worker killed before the ack) gets the first
    run's result and counts nothing again; one while that run may still go on is retried once it
    cannot. Called directly (no task id), a replay counts its page views again. Give each event a
    ``ts``, so a retry records the event's time, not its own."""
    batch = clean_events(events)

    def record(fence: Any = None) -> dict[str, Any]:
        result = ingest.record_events(batch, fence=fence, day_writes=ingest.PROCESS_DAY_WRITES)
        return {"accepted": result.accepted, "last_seen_updated": result.last_seen_updated}

    if self.request.id is None:
        return record()
    try:
        return idempotency.once("task", self.request.id, events, record).body
    except KeyInUse as running:
        raise self.retry(countdown=running.retry_after, exc=running) from None


def job_options(job: str) -> dict[str, Any]:
    """``shared_task`` options of scheduled job ``job``: time limits that end a run before its lock
    expires (``locks.job_time_limits``), read once, when the tasks load."""
    soft, hard = locks.job_time_limits(job)
    return {
        **while_redis_is_away(max_retries=3, backoff_max=600),
        "soft_time_limit": soft,
        "time_limit": hard,
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


@shared_task(name="activity.flush", **job_options("flush"))
def flush(self: Task) -> dict[str, Any]:
    """Write last-seen changes to the database (every ``ACTIVITY_FLUSH_INTERVAL`` seconds)."""
    return run_exclusive(self, "flush", lambda: asdict(flush_service.flush()))


@shared_task(name="activity.prune", **job_options("prune"))
def prune(self: Task) -> dict[str, Any]:
    """Drop last-seen members older than ``ACTIVITY_LAST_SEEN_RETENTION`` (never unflushed ones)."""

    def body() -> dict[str, Any]:
        removed, kept = last_seen_service.prune()
        return {"removed": removed, "kept_unflushed": kept}

    return run_exclusive(self, "prune", body)


@shared_task(name="activity.sweep", **job_options("sweep"))
def sweep(self: Task) -> dict[str, Any]:
    """Find keys under the prefix without a TTL and repair or delete them."""
    return run_exclusive(self, "sweep", lambda: asdict(sweep_service.sweep()))


@shared_task(name="activity.erase_user", **while_redis_is_away(max_retries=None))
def erase_user(user: str) -> dict[str, int]:
    """Erase ``user`` everywhere (``InvalidValue`` for a malformed id: not retried)."""
    erased = privacy.erase(clean_user(user))
    return {"traces": erased.traces, "rows": erased.rows, "groups": erased.groups}


@shared_task(name="activity.refresh_reports", soft_time_limit=REPORT_REFRESH_INTERVAL)
def refresh_reports() -> int:
    """Merge the current pending by-name entries (at most ``reports.MERGE_SLICES_PER_RUN`` slices a
    period), then rebuild the reports read lately before they expire; returns how many were built.
    Not retried: the next run, one interval later, redoes a failed one."""
    return reports.refresh()


@shared_task(name="activity.rebuild_report", soft_time_limit=reports.WAIT_S)
def rebuild_report(name: str, period: str = "day") -> dict[str, str]:
    """Rebuild one report now; a report nobody reads again simply expires, as any other copy."""
    return {"report": name, "period": period, "outcome": reports.rebuild(name, period)}


@shared_task(name="activity.rollup_day", **while_redis_is_away(max_retries=10))
def rollup_day(day: str | None = None) -> dict[str, Any]:
    """Roll up ``day`` (ISO date; default: yesterday in the calendar's zone) into its ``DailyRollup`` row."""
    target = date.fromisoformat(day) if day else calendar.today() - timedelta(days=1)
    row = audience.rollup_day(target)
    if row is None:
        return {"day": target.isoformat(), "skipped": "another run holds the lock"}
    return {"day": target.isoformat(), **{figure: getattr(row, figure) for figure in audience.ROLLUP_FIGURES}}
