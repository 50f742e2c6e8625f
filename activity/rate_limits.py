"""Rate limits: how many requests a client may make per window, counted in Redis.

A fixed window: a client may make ``limit`` requests in each window of ``duration`` seconds (so at
most twice that across a window boundary). When Redis cannot count, requests are let through
(logged): the endpoints that need Redis answer 503 on their own, and the ones that do not (the
OpenAPI document and its docs page) stay up.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from activity import clock
from activity.errors import StoreUnavailable
from activity.store import rate_limits as store
from activity.store.client import get_client

logger = logging.getLogger("activity.rate_limits")


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    retry_after: float  # seconds until the window ends (when refused)


def hit(scope: str, ident: str, limit: int, duration: int) -> Decision:
    """Count one request of client ``ident`` under ``scope``; refused past ``limit`` per window."""
    try:
        count, left = store.hit(get_client(), scope, ident, duration, clock.now())
    except StoreUnavailable as error:
        logger.warning("rate limit %s not counted (Redis unavailable: %s); request let through", scope, error)
        return Decision(allowed=True, retry_after=0.0)
    return Decision(allowed=count <= limit, retry_after=max(left, 0.0))
