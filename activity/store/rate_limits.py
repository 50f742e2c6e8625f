"""Request counters for rate limiting: one counter per client and fixed window, O(1) per client.

DRF's own throttles keep the time of every request of the window in one cached list, read and
written whole on each request, so their cost grows with the rate. A fixed window needs one INCR.
"""

from __future__ import annotations

from activity.store import keys
from activity.store.client import Client


def hit(client: Client, scope: str, ident: str, window_s: int, now: float) -> tuple[int, float]:
    """Count one request of ``ident`` in the current ``window_s`` window of ``scope``; returns the
    window's count so far and the seconds until the window ends. One round trip (INCR + EXPIRE in
    one MULTI, so the counter never lives without its TTL)."""
    window = int(now // window_s)
    key = keys.rate_limit(scope, ident, window)
    pipe = client.pipeline(transaction=True)
    pipe.incr(key)
    pipe.expire(key, window_s + 1)
    count, _ = pipe.execute()
    return count, (window + 1) * window_s - now
