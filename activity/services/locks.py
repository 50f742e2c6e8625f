"""Taking a lock, the one way jobs, the rollup and report rebuilds do it. ``exclusive`` never waits:
periodic work that finds its lock taken skips, as the next tick comes soon; a reader that needs the
holder's result waits for its release announcement (``wait_for_release``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from activity import conf
from activity.store import locks as store
from activity.store.client import get_client

JOB_LOCK_TTL = 60  # seconds a scheduled job's lock lives (but the flush's); its time limits end a run before
# The flush's lock lives this share of ACTIVITY_FLUSH_INTERVAL, its time limits end a run before the
# lock expires, and the reaper hands back claims older than the lock's TTL: so the lock and the claims
# of a run killed anywhere are free for the run of the next tick, or of the one after (docs/flush.md).
FLUSH_LOCK_SHARE = 0.8


@contextmanager
def exclusive(name: str, ttl: float, retry: bool = False) -> Iterator[bool]:
    """Hold lock ``name`` (for at most ``ttl`` seconds) for the block; yields False, holding
    nothing, when another client has it. Leaving the block releases it and announces the release
    (``retry``: see ``store.locks.Lock``)."""
    with store.Lock(get_client(), name, int(ttl * 1000), retry) as acquired:
        yield acquired


def wait_for_release(name: str, seconds: float, ttl: float) -> bool:
    """Block until lock ``name``'s holder releases it, at most ``seconds`` (one short step; call it
    in a loop with a deadline). True when a release was announced."""
    return store.wait(get_client(), name, seconds, int(ttl * 1000))


def job_ttl(name: str = "") -> float:
    """Seconds scheduled job ``name``'s lock lives; its task's soft and hard time limits are set below
    it. The flush's is ``FLUSH_LOCK_SHARE`` of its interval, any other job's ``JOB_LOCK_TTL``."""
    if name == "flush":
        return FLUSH_LOCK_SHARE * float(conf.settings.FLUSH_INTERVAL)
    return float(JOB_LOCK_TTL)


def job_time_limits(name: str = "") -> tuple[float, float]:
    """(soft, hard) Celery time limits for locked job ``name``: both end the run before its lock expires."""
    ttl = job_ttl(name)
    return ttl * 0.75, ttl * 0.9


def exclusive_job(name: str) -> AbstractContextManager[bool]:
    """``exclusive`` for scheduled job ``name`` (flush, prune, sweep, ...), with its job lock TTL; a
    request Redis leaves unanswered is sent again, so a failed run does not make the next ones skip."""
    return exclusive(f"job:{name}", job_ttl(name), retry=True)


def wait_for_job(name: str, seconds: float) -> bool:
    """``wait_for_release`` for scheduled job ``name``'s lock (one step of at most ``seconds``)."""
    return wait_for_release(f"job:{name}", seconds, job_ttl(name))
