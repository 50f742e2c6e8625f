"""Requests that were not people's, counted per UTC day and kind (``bot``, ``machine``): one small
hash a day, kept as long as the other per-day audience keys."""

from __future__ import annotations

from datetime import date

from activity.calendar import day_name
from activity.store import keys
from activity.store.daily import day_ttl
from activity.store.scripts import Pipeline


def queue_count(pipe: Pipeline, kind: str, day: date, now: float, requests: int = 1) -> None:
    """Queue HINCRBY of ``kind`` in ``day``'s hash by ``requests`` (and its TTL); nothing for a day
    out of retention."""
    ttl = day_ttl(day, now)
    if ttl > 0:
        key = keys.traffic(day_name(day))
        pipe.hincrby(key, kind, requests)
        pipe.expire(key, ttl)


def queue_read(pipe: Pipeline, day: date, kinds: tuple[str, ...]) -> int:
    """Queue the read of ``day``'s counts of ``kinds`` (HMGET); returns its reply index."""
    at = len(pipe)
    pipe.hmget(keys.traffic(day_name(day)), list(kinds))
    return at
