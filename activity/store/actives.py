"""Active users per day: a bitmap indexed by integer user id (exact), plus a HyperLogLog for ids
that are not small integers. Weeks and months are unions of days, cached briefly."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from datetime import date

from activity.calendar import day_name
from activity.store import keys
from activity.store.daily import live_days, queue_union_count
from activity.store.scripts import Pipeline


def bitmap_offset(user: str, max_id: int) -> int | None:
    """The bit of an integer user id (canonical decimal, 0..max_id), or None to count it by HLL."""
    if not user.isdigit() or (len(user) > 1 and user[0] == "0"):
        return None
    offset = int(user)
    return offset if offset <= max_id else None


def queue_actives(pipe: Pipeline, actives: Collection[tuple[str, date]], now: float, max_id: int) -> None:
    """Queue SETBIT (integer ids) or PFADD (other ids) into each day's active-user keys."""
    bits: dict[date, set[int]] = defaultdict(set)
    others: dict[date, set[str]] = defaultdict(set)
    ttls = live_days(actives, now)
    for user, day in actives:
        if day not in ttls:
            continue
        offset = bitmap_offset(user, max_id)
        if offset is None:
            others[day].add(user)
        else:
            bits[day].add(offset)
    for day, offsets in bits.items():
        key = keys.active_bits(day_name(day))
        for offset in sorted(offsets):
            pipe.setbit(key, offset, 1)
        pipe.expire(key, ttls[day])
    for day, users in others.items():
        key = keys.active_hll(day_name(day))
        pipe.pfadd(key, *users)
        pipe.expire(key, ttls[day])


def queue_active_day(pipe: Pipeline, day: date) -> list[int]:
    """Queue the reads whose replies sum to the exact-plus-estimated active users of ``day``."""
    first = len(pipe)
    pipe.bitcount(keys.active_bits(day_name(day)))
    pipe.pfcount(keys.active_hll(day_name(day)))
    return [first, first + 1]


def queue_active_union(pipe: Pipeline, period: str, days: Sequence[date], cache_ms: int) -> list[int]:
    """Queue the union counts (bitmap and HLL) of the active users over ``days``."""
    names = [day_name(day) for day in days]
    first, last = names[0], names[-1]
    return [
        queue_union_count(
            pipe, "bits", keys.active_bits_union(period, first, last), list(map(keys.active_bits, names)), cache_ms
        ),
        queue_union_count(
            pipe, "hll", keys.active_hll_union(period, first, last), list(map(keys.active_hll, names)), cache_ms
        ),
    ]
