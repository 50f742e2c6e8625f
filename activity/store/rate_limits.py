"""Request counters for rate limiting: one counter per client and fixed window, O(1) per client.

DRF's own throttles keep the time of every request of the window in one cached list, read and
written whole on each request, so their cost grows with the rate. A fixed window needs one INCR,
queued on the request's own round trip (``round_trip``).
"""

from __future__ import annotations

from activity.store import keys
from activity.store.scripts import LuaScript, Pipeline

RATE_HIT = LuaScript("rate_hit")


def window_of(now: float, window_s: int) -> tuple[int, float]:
    """The number of the fixed window holding ``now``, and the time it ends."""
    window = int(now // window_s)
    return window, (window + 1) * window_s


def counter_key(scope: str, ident: str, window: int) -> str:
    return keys.rate_limit(scope, ident, window)


def queue_hit(pipe: Pipeline, scope: str, ident: str, window_s: int, now: float) -> int:
    """Queue one request of ``ident`` in the current ``window_s`` window of ``scope``; the reply at
    the returned index is the window's count so far."""
    window, _ = window_of(now, window_s)
    return pipe.script(RATE_HIT, [keys.rate_limit(scope, ident, window)], [window_s + 1])
