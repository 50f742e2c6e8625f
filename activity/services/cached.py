"""A copy in Redis rebuilt by one client at a time (reports, next-page picks; docs/sessions-reports.md):
the lock's holder rebuilds, the others serve the stale copy or wait for its release announcement, so
any number of readers cause one build per expiry. A dead holder is replaced when its lock expires."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from activity import metrics
from activity.services import locks

logger = logging.getLogger("activity.services.cached")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Copy(Generic[T]):
    """How to read, judge and rebuild one cached copy."""

    lock: str  # the name of the lock guarding its rebuilds
    wait_s: float  # lock TTL; a reader without a copy waits up to twice this
    stale_ms: int  # how long the copy is kept past its freshness: fresh while its PTTL is above this
    read: Callable[[], T | None]  # the copy as stored (one round trip), None when there is none
    is_fresh: Callable[[T], bool]  # whether a copy read is still fresh
    pttl_ms: Callable[[], int]  # milliseconds the stored copy still lives (negative: none)
    build: Callable[[], object]  # rebuild it now


def fresh_for_ms(copy: Copy[T]) -> int:
    """Milliseconds the stored copy stays fresh; negative when stale or missing."""
    pttl = copy.pttl_ms()
    return pttl - copy.stale_ms if pttl >= 0 else -1


def build_unless_fresh(copy: Copy[T], margin_ms: int = 0) -> str:
    """Rebuild behind the lock unless the copy stays fresh for more than ``margin_ms`` (checked once
    holding it, so a reader that raced a finished build does not build again): ``built``, ``fresh``
    or ``busy`` (another client holds the lock)."""
    with locks.exclusive(copy.lock, copy.wait_s) as acquired:
        if not acquired:
            return "busy"
        if fresh_for_ms(copy) > margin_ms:
            return "fresh"
        copy.build()
        metrics.REPORT_REBUILDS.inc()
        return "built"


def serve(copy: Copy[T]) -> tuple[T, str]:
    """The copy and how it was served: ``hit`` (fresh, one round trip), ``stale`` (the old copy while
    another client rebuilds) or ``miss`` (built now, by this reader or by the holder it waited for)."""
    found = copy.read()
    if found is not None and copy.is_fresh(found):
        return found, "hit"
    deadline = time.monotonic() + 2 * copy.wait_s  # past the lock TTL, so a dead holder is replaced
    while True:
        outcome = build_unless_fresh(copy)
        if outcome != "busy":
            return copy.read(), "miss" if outcome == "built" else "hit"
        if found is not None:
            metrics.REPORT_STALE_SERVES.inc()
            return found, "stale"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            logger.warning("%s: no build announced in time; building without the lock", copy.lock)
            copy.build()
            metrics.REPORT_REBUILDS.inc()
            return copy.read(), "miss"
        locks.wait_for_release(copy.lock, remaining, copy.wait_s)
        found = copy.read()
        if found is not None:
            return found, "miss"
