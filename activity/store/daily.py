"""What the per-day audience keys share: their retention, unions of days, and summed replies.

Every per-day audience key (visitors, active users) lives ``KEEP_DAYS`` beyond its day, longer
than the longest period that reads it (a month, 31 days) plus a margin for a late rollup. A week
or month figure is the count of a union of days, built by one script and reused for a short while.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date

from activity.calendar import seconds_left
from activity.store.scripts import LuaScript, Pipeline

UNION_COUNT = LuaScript("union_count")
KEEP_DAYS = 35


def day_ttl(day: date, now: float) -> int:
    """Seconds a key of ``day`` still has to live at ``now``; <= 0 once the day is out of retention."""
    return seconds_left(day, KEEP_DAYS, now)


def live_days(pairs: Iterable[tuple[object, date]], now: float) -> dict[date, int]:
    """The TTL of each day among ``pairs`` still in retention (a batch has one or two days)."""
    ttls = {day: day_ttl(day, now) for day in {day for _, day in pairs}}
    return {day: ttl for day, ttl in ttls.items() if ttl > 0}


def queue_union_count(pipe: Pipeline, kind: str, union: str, days: Sequence[str], cache_ms: int) -> int:
    """Queue the count of the union of the per-day keys ``days`` (``bits``: BITOP OR + BITCOUNT;
    ``hll``: PFMERGE + PFCOUNT), kept in ``union`` for ``cache_ms``; returns its reply index."""
    return pipe.script(UNION_COUNT, [union, *days], [kind, cache_ms])


def total(results: Sequence[object], indexes: Iterable[int]) -> int:
    """The sum of the integer replies at ``indexes`` (a missing key's None counts as 0)."""
    return sum(int(results[index] or 0) for index in indexes)
