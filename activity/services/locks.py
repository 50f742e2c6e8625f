"""Taking a lock, the one way jobs, the rollup and report rebuilds do it. ``exclusive`` never waits:
periodic work that finds its lock taken skips, as the next tick comes soon; a reader that needs the
holder's result waits for its release announcement (``wait_for_release``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from activity.store import locks as store
from activity.store.client import get_client

JOB_LOCK_TTL = 60  # seconds a scheduled job's lock lives; its task's time limits end the run before


@contextmanager
def exclusive(name: str, ttl: float, retry_release: bool = False) -> Iterator[bool]:
    """Hold lock ``name`` (for at most ``ttl`` seconds) for the block; yields False, holding
    nothing, when another client has it. Leaving the block releases it and announces the release
    (``retry_release``: see ``store.locks.Lock``)."""
    with store.Lock(get_client(), name, int(ttl * 1000), retry_release) as acquired:
        yield acquired


def wait_for_release(name: str, seconds: float, ttl: float) -> bool:
    """Block until lock ``name``'s holder releases it, at most ``seconds`` (one short step; call it
    in a loop with a deadline). True when a release was announced."""
    return store.wait(get_client(), name, seconds, int(ttl * 1000))


def job_ttl() -> float:
    """Seconds a scheduled job's lock lives; task soft and hard time limits are set below it."""
    return float(JOB_LOCK_TTL)


def job_time_limits() -> tuple[float, float]:
    """(soft, hard) Celery time limits for a locked job: both end the run before its lock expires."""
    ttl = job_ttl()
    return ttl * 0.75, ttl * 0.9


def exclusive_job(name: str) -> AbstractContextManager[bool]:
    """``exclusive`` for scheduled job ``name`` (flush, prune, sweep, ...), with the job lock TTL; a
    release Redis refuses is retried, so a failed run does not skip the next ones."""
    return exclusive(f"job:{name}", job_ttl(), retry_release=True)


def wait_for_job(name: str, seconds: float) -> bool:
    """``wait_for_release`` for scheduled job ``name``'s lock (one step of at most ``seconds``)."""
    return wait_for_release(f"job:{name}", seconds, job_ttl())
