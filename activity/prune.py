"""Pruning last seen: Redis keeps the recent past, the database keeps everything."""

from __future__ import annotations

from activity import clock, conf
from activity.store import last_seen as store
from activity.store.client import get_client


def prune(retention: float | None = None, step: int = 1000) -> tuple[int, int]:
    """Drop last-seen members older than the retention from Redis; the database keeps them.

    A member whose change is not yet in the database (dirty or claimed) is kept. ``step`` members
    are examined per script call, so no call's work grows with the number of users. Returns
    (removed, kept-because-unflushed).
    """
    retention = conf.settings.LAST_SEEN_RETENTION if retention is None else retention
    return store.prune(get_client(), clock.now() - retention, step)
