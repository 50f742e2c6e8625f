"""Running a scheduled job exclusively: one holder at a time across workers and beat instances.

Celery tasks (ours and other teams') wrap their body in ``exclusive(name)``; a second run that
finds the job busy skips instead of waiting, which is right for periodic jobs: the next tick
comes soon, and every job here is idempotent.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from activity import conf
from activity.store import keys
from activity.store.client import get_client
from activity.store.locks import Lock


def lock_ttl() -> float:
    """Seconds a job's lock lives; task soft and hard time limits are set below it."""
    return float(conf.settings.JOB_LOCK_TTL)


def time_limits() -> tuple[float, float]:
    """(soft, hard) Celery time limits for a locked job: both end the run before its lock expires."""
    ttl = lock_ttl()
    return ttl * 0.75, ttl * 0.9


@contextmanager
def exclusive(name: str) -> Iterator[bool]:
    """Hold job ``name``'s lock for the block; yields False (and holds nothing) when it is busy."""
    lock = Lock(get_client(), keys.lock(f"job:{name}"), int(lock_ttl() * 1000))
    if not lock.acquire():
        yield False
        return
    try:
        yield True
    finally:
        lock.release()
