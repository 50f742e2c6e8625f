"""Request counters for rate limiting: one counter per client and fixed window (INCRBY), so the cost
stays O(1) where DRF's throttles read and write every request time of the window."""

from __future__ import annotations

from collections.abc import Sequence

from activity.store import keys
from activity.store.client import Client


def window_of(now: float, window_s: int) -> tuple[int, float]:
    """The number of the fixed window holding ``now``, and the time it ends."""
    window = int(now // window_s)
    return window, (window + 1) * window_s


def counter_key(scope: str, ident: str, window: int) -> str:
    return keys.rate_limit(scope, ident, window)


def add(client: Client, counts: Sequence[tuple[str, str, int, int, int]]) -> list[int]:
    """Add to each (scope, client ident, window number, window seconds, requests) counter, giving it
    the window's length plus a second to live; returns each window's total. One round trip."""
    pipe = client.pipeline(transaction=False)
    for scope, ident, window, window_s, requests in counts:
        pipe.incrby(counter_key(scope, ident, window), requests)
        pipe.expire(counter_key(scope, ident, window), window_s + 1)
    return pipe.execute()[::2]
