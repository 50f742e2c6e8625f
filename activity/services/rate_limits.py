"""Fixed-window rate limits decided with no Redis command on the request's path: from this
process's admitted requests plus the window's total as Redis last answered, the counts reaching Redis
with the tracking batches. So a client spread over processes may get a little past the limit: what
the others admitted within one batch time (docs/limits-errors.md)."""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from activity import clock, conf
from activity.expiring import ExpiringCache
from activity.store import rate_limits as store
from activity.store.client import get_client

MAX_WINDOWS = 10_000  # client windows remembered per process (the least recently used forgotten)
MAX_IDENT = 64
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def rate_of(scope: str) -> tuple[int, int] | None:
    """The scope's (requests, window seconds) from ``ACTIVITY_THROTTLE_RATES``; None: unlimited."""
    text = conf.settings.THROTTLE_RATES.get(scope)
    return None if text is None else _parsed(text)


@functools.lru_cache(maxsize=64)
def _parsed(rate: str) -> tuple[int, int]:
    count, period = rate.split("/")
    return int(count), UNITS[period[0]]


def short(ident: str) -> str:
    """An identity bounded in length (a hash for the rare long one)."""
    return ident if len(ident) <= MAX_IDENT else hashlib.blake2b(ident.encode(), digest_size=16).hexdigest()


def user_ident(user: str) -> str:
    """How a signed-in user is counted."""
    return f"user:{short(user)}"


def user_counters(user: str) -> list[str]:
    """The Redis counters that may name ``user`` now: each scope's current and previous window (a
    counter outlives its window by a second). For an erase."""
    now, ident = clock.now(), user_ident(user)
    found = []
    for scope in conf.settings.THROTTLE_RATES:
        rate = rate_of(scope)
        if rate is None:
            continue
        window, _ = store.window_of(now, rate[1])
        found += [store.counter_key(scope, ident, window), store.counter_key(scope, ident, window - 1)]
    return found


@dataclass(frozen=True, slots=True)
class Window:
    """One client's fixed window of one scope: what a request is counted in."""

    scope: str
    ident: str
    number: int
    duration: int

    @property
    def ends(self) -> float:
        return (self.number + 1) * self.duration


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    retry_after: float  # seconds until the window ends (when refused)
    window: Window | None  # the window an admitted request is counted in, for ``send``


_lock = threading.Lock()
_unsent: ExpiringCache[int] = ExpiringCache(MAX_WINDOWS)  # admitted here, not yet in a total Redis gave
_total: ExpiringCache[int] = ExpiringCache(MAX_WINDOWS)  # the window's total as Redis last answered


def forget() -> None:
    """Forget every count this process holds, as a process that just started knows none."""
    with _lock:
        _unsent.clear()
        _total.clear()


def _current(scope: str, ident: str, duration: int) -> tuple[Window, float]:
    """``ident``'s window of ``scope`` now, and the seconds left in it."""
    now = clock.now()
    number, ends = store.window_of(now, duration)
    return Window(scope, ident, number, duration), ends - now


def hit(scope: str, ident: str, limit: int, duration: int) -> Decision:
    """Admit one request unless its window's count, as this process knows it, has reached ``limit``;
    an admitted one is counted here at once, and is for the caller to ``send``."""
    window, left = _current(scope, ident, duration)
    with _lock:
        unsent = _unsent.get(window) or 0
        if (_total.get(window) or 0) + unsent >= limit:
            return Decision(allowed=False, retry_after=left, window=None)
        _unsent.put(window, unsent + 1, window.ends)
    return Decision(allowed=True, retry_after=0.0, window=window)


def send(windows: Sequence[Window]) -> None:
    """Add admitted requests to their windows' counters in Redis (one round trip), and remember
    the totals Redis answers. Raises ``StoreUnavailable``."""
    counts = Counter(windows)
    totals = store.add(get_client(), [(w.scope, w.ident, w.number, w.duration, n) for w, n in counts.items()])
    with _lock:
        for (window, sent), total in zip(counts.items(), totals, strict=True):
            _unsent.put(window, max((_unsent.get(window) or 0) - sent, 0), window.ends)
            _total.put(window, max(total, _total.get(window) or 0), window.ends)
