"""Visitors and audience figures: first visit ever, unique visitors and active users per day.

- First visit ever: one HSETNX per visitor into partitioned hashes (partition = low bits of the
  128-bit id, field = the 16 raw bytes), counted per day and shard by the same Lua call; the
  counters are harvested with GETDEL into per-day accumulators (``bench/membership.py`` measured
  the structure against flat keys, sets and sorted sets).
- Unique visitors per day: a HyperLogLog of visitor ids.
- Active users per day: a bitmap indexed by integer user id (exact), plus a HyperLogLog for ids that
  are not small integers. Weeks and months are unions of days, cached briefly.

Every per-day key lives ``KEEP_DAYS`` beyond its day, longer than the longest period that reads it
(a month, 31 days) plus a margin for a late rollup.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from datetime import UTC, date, datetime, time

from activity.store import keys
from activity.store.scripts import LuaScript, Pipeline

FIRST_VISIT = LuaScript("first_visit")
HARVEST_COUNTER = LuaScript("harvest_counter")
UNION_COUNT = LuaScript("union_count")

VISITOR_SHARDS = 16  # hash tags {vis:0}..{vis:15}; changing it re-homes every id, so it is fixed
KEEP_DAYS = 35
DAY_SECONDS = 86400
EPOCH = date(1970, 1, 1)


def day_name(day: date) -> str:
    return day.strftime("%Y%m%d")


def day_of(ts: float) -> date:
    """The UTC day of an epoch time."""
    return datetime.fromtimestamp(ts, UTC).date()


def day_ttl(day: date, now: float) -> int:
    """Seconds a key of ``day`` still has to live at ``now``; <= 0 once the day is out of retention."""
    start = datetime.combine(day, time(), UTC).timestamp()
    return int(start + (KEEP_DAYS + 1) * DAY_SECONDS - now)


def _live_days(pairs: Iterable[tuple[object, date]], now: float) -> dict[date, int]:
    """The TTL of each day among ``pairs`` still in retention (a batch has one or two days)."""
    ttls = {day: day_ttl(day, now) for day in {day for _, day in pairs}}
    return {day: ttl for day, ttl in ttls.items() if ttl > 0}


def user_visitor_id(user: str) -> bytes:
    """A signed-in user's visitor id: 128 bits derived from the user id, so the user keeps it."""
    return hashlib.blake2b(b"user\0" + user.encode(), digest_size=16).digest()


def _home(visitor: bytes, bits: int) -> tuple[int, int]:
    """(shard, partition) of a visitor id: partition = low ``bits`` bits, shard = its low bits."""
    partition = int.from_bytes(visitor, "big") & ((1 << bits) - 1)
    return partition % VISITOR_SHARDS, partition


def queue_visits(pipe: Pipeline, visits: Collection[tuple[bytes, date]], now: float, partition_bits: int) -> list[int]:
    """Queue first-visit check-and-sets and unique-visitor PFADDs; returns the first-visit reply indexes.

    One EVALSHA per (shard, day) in the batch, each reply the number of new visitors in it.
    """
    groups: dict[tuple[int, date], dict[bytes, int]] = defaultdict(dict)
    per_day: dict[date, set[bytes]] = defaultdict(set)
    ttls = _live_days(visits, now)
    for visitor, day in visits:
        if day not in ttls:
            continue
        shard, partition = _home(visitor, partition_bits)
        groups[shard, day][visitor] = partition
        per_day[day].add(visitor)
    indexes = []
    for (shard, day), members in groups.items():
        hashes = [keys.visitor_seen(shard, partition) for partition in members.values()]
        args = [(day - EPOCH).days, ttls[day], *members]
        indexes.append(pipe.script(FIRST_VISIT, [keys.new_visitors(shard, day_name(day)), *hashes], args))
    for day, members in per_day.items():
        key = keys.unique_visitors(day_name(day))
        pipe.pfadd(key, *members)
        pipe.expire(key, ttls[day])
    return indexes


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
    ttls = _live_days(actives, now)
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
        pipe.script(
            UNION_COUNT,
            [keys.active_bits_union(period, first, last), *map(keys.active_bits, names)],
            ["bits", cache_ms],
        ),
        pipe.script(
            UNION_COUNT,
            [keys.active_hll_union(period, first, last), *map(keys.active_hll, names)],
            ["hll", cache_ms],
        ),
    ]


def queue_unique_day(pipe: Pipeline, day: date) -> list[int]:
    first = len(pipe)
    pipe.pfcount(keys.unique_visitors(day_name(day)))
    return [first]


def queue_unique_union(pipe: Pipeline, period: str, days: Sequence[date], cache_ms: int) -> list[int]:
    names = [day_name(day) for day in days]
    union = keys.unique_visitors_union(period, names[0], names[-1])
    return [pipe.script(UNION_COUNT, [union, *map(keys.unique_visitors, names)], ["hll", cache_ms])]


def queue_new_visitors(pipe: Pipeline, day: date) -> list[int]:
    """Queue the reads whose replies sum to the new visitors of ``day`` (harvested or not yet)."""
    first = len(pipe)
    for shard in range(VISITOR_SHARDS):
        pipe.get(keys.new_visitors(shard, day_name(day)))
        pipe.get(keys.new_visitors_harvested(shard, day_name(day)))
    return list(range(first, len(pipe)))


def queue_harvest(pipe: Pipeline, day: date, now: float) -> list[int]:
    """Queue the GETDEL harvest of each shard's counter of ``day``; the replies sum to the day's total."""
    ttl = max(day_ttl(day, now), 1)
    name = day_name(day)
    return [
        pipe.script(HARVEST_COUNTER, [keys.new_visitors(shard, name), keys.new_visitors_harvested(shard, name)], [ttl])
        for shard in range(VISITOR_SHARDS)
    ]


def total(results: Sequence[object], indexes: Iterable[int]) -> int:
    """The sum of the integer replies at ``indexes`` (a missing key's None counts as 0)."""
    return sum(int(results[index] or 0) for index in indexes)
