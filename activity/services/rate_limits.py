"""Rate limits: how many requests a client may make per window, counted in Redis.

A fixed window: a client may make ``limit`` requests in each window of ``duration`` seconds. The
count travels with the request's own Redis round trip (``store.round_trip``), so counting costs no
round trip of its own, and its reply comes back with the request's work. So the decision for a
request cannot wait for its own count: a process that sees a client's count reach the limit
refuses that client, without asking Redis, until the window ends. Other processes learn it at
their next request from the client, so a window admits at most one request more than ``limit`` per
process (and per concurrent thread) - the price of not paying a round trip. A refused request
writes nothing. When Redis cannot count, requests are let through (logged): the endpoints that need
Redis answer 503 on their own, and the ones that do not (the OpenAPI document) stay up.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from rest_framework.settings import api_settings

from activity import clock
from activity.errors import StoreUnavailable
from activity.expiring import ExpiringCache
from activity.store import rate_limits as store
from activity.store import round_trip
from activity.store.client import get_client
from activity.store.scripts import Pipeline

logger = logging.getLogger("activity.services.rate_limits")

MAX_BLOCKED = 10_000  # clients remembered as over their limit, per process (the oldest forgotten)
MAX_IDENT = 64
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def rate_of(scope: str) -> tuple[int, int] | None:
    """The scope's (requests, window seconds) from DRF's ``DEFAULT_THROTTLE_RATES``; None: unlimited."""
    text = api_settings.DEFAULT_THROTTLE_RATES.get(scope)
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
    for scope in api_settings.DEFAULT_THROTTLE_RATES:
        rate = rate_of(scope)
        if rate is None:
            continue
        window, _ = store.window_of(now, rate[1])
        found += [store.counter_key(scope, ident, window), store.counter_key(scope, ident, window - 1)]
    return found


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    retry_after: float  # seconds until the window ends (when refused)


# Clients this process saw reach their limit, each until its window ends.
blocked: ExpiringCache[float] = ExpiringCache(MAX_BLOCKED)


@dataclass
class _Hit:
    """The request's count, riding along with its round trip."""

    scope: str
    ident: str
    limit: int
    duration: int
    now: float
    needs_success: bool = False
    _index: int = -1

    def queue(self, pipe: Pipeline) -> None:
        self._index = store.queue_hit(pipe, self.scope, self.ident, self.duration, self.now)

    def arrived(self, replies: list[Any]) -> None:
        count = replies[self._index]
        if isinstance(count, int) and count >= self.limit:
            until = store.window_of(self.now, self.duration)[1]
            blocked.put((self.scope, self.ident), until, until)


def hit(scope: str, ident: str, limit: int, duration: int) -> Decision:
    """Count one request of client ``ident`` under ``scope``: refused (no Redis call) when this
    process already saw the client reach ``limit`` in the current window; otherwise let through,
    its count queued for the request's round trip."""
    now = clock.now()
    until = blocked.get((scope, ident))
    if until is not None:
        return Decision(allowed=False, retry_after=until - now)
    try:
        round_trip.ride(_Hit(scope, ident, limit, duration, now), get_client())
    except StoreUnavailable as error:  # sent at once (outside a request's round trip) and failed
        logger.warning("rate limit %s not counted (Redis unavailable: %s); request let through", scope, error)
    return Decision(allowed=True, retry_after=0.0)
