"""Audience figures per day, ISO week and month (docs/visitors.md), each written into the three
periods' keys at once, so no read is a union over days:

- active users: a bitmap by integer user id (exact and erasable), a HyperLogLog for other ids;
- first visit ever: HSETNX into partitioned hashes, counted per day in the same script;
- unique visitors: a HyperLogLog of anonymous ids; signed-in visitors are the active users;
- requests that were not people's: a hash a day, by kind.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import date

from activity.calendar import PERIODS, day_name, day_number, last_day, name_of
from activity.store import keys, retention
from activity.store import last_seen as last_seen_store
from activity.store.client import Client, total
from activity.store.keys import day_ttl
from activity.store.scripts import LuaScript, Pipeline

ACTIVES_RECORD = LuaScript("actives_record")
ADD_TO_PERIODS = LuaScript("add_to_periods")
FIRST_VISIT = LuaScript("first_visit")
HARVEST_COUNTER = LuaScript("harvest_counter")

BITS = (keys.active_bits, keys.active_bits_week, keys.active_bits_month)
HLLS = (keys.active_hll, keys.active_hll_week, keys.active_hll_month)
UNIQUE = (keys.unique_visitors, keys.unique_visitors_week, keys.unique_visitors_month)
COUNT_CHUNK_BYTES = 1 << 20  # one BITCOUNT reads at most 1 MiB (8M ids)
# Integer user ids up to this are counted exactly in per-day bitmaps (MAX_ID / 8 bytes a day at most).
MAX_ID = 2**26
# "First visit ever" hashes: 2**PARTITION_BITS partitions. Fixed once ids are stored: changing it
# re-homes every id (docs/visitors.md).
PARTITION_BITS = 17
VISITOR_SHARDS = 16  # hash tags {vis:0}..{vis:15}; changing it re-homes every id, so it is fixed
NOT_PEOPLE = ("bot", "machine")  # the kinds of traffic counted per day (activity.services.traffic)


def _dated_keys(builders: Sequence[Callable[[str], str]], day: date, now: float) -> list[tuple[str, int]]:
    """(key, TTL) of the day's, week's and month's key of one figure (``builders`` in that order)."""
    ttls = [day_ttl(day if period == "day" else last_day(period, day), now) for period in PERIODS]
    names = (name_of(period, day) for period in PERIODS)
    return [(build(name), ttl) for build, name, ttl in zip(builders, names, ttls, strict=True)]


def _live_days(pairs: Iterable[tuple[object, date]], now: float) -> dict[date, int]:
    """The TTL of each day among ``pairs`` still in retention (a batch has one or two days)."""
    ttls = {day: day_ttl(day, now) for day in {day for _, day in pairs}}
    return {day: ttl for day, ttl in ttls.items() if ttl > 0}


def bitmap_offset(user: str) -> int | None:
    """The bit of an integer user id (canonical decimal, 0..MAX_ID), or None to count it by HLL."""
    if not user.isdigit() or (len(user) > 1 and user[0] == "0"):
        return None
    offset = int(user)
    return offset if offset <= MAX_ID else None


def user_visitor_id(user: str) -> bytes:
    """A signed-in user's visitor id: 128 bits derived from the user id, so the user keeps it."""
    return hashlib.blake2b(b"user\0" + user.encode(), digest_size=16).digest()


def _home(visitor: bytes) -> tuple[int, int]:
    """(shard, partition) of a visitor id: partition = low ``PARTITION_BITS`` bits, shard = its low bits."""
    partition = int.from_bytes(visitor, "big") & ((1 << PARTITION_BITS) - 1)
    return partition % VISITOR_SHARDS, partition


def visitor_home(visitor: bytes) -> tuple[str, str]:
    """(the partition hash holding ``visitor``, its shard's tombstones): where an erase looks."""
    shard, partition = _home(visitor)
    return keys.visitor_seen(shard, partition), keys.tombstones(f"vis:{shard}")


# --- writes, queued on the caller's pipeline (a batch's one round trip) ------------------------


def queue_actives(pipe: Pipeline, actives: Collection[tuple[str, date]], now: float, first_active: bool = True) -> None:
    """Queue one EVALSHA per day of the batch: SETBIT (integer ids) or PFADD (other ids) into the
    active-user keys of the day, its week and its month; and, for integer ids, the ``first_active``
    call recording the day as the first of those seen for the first time (``first_active=False``
    leaves it out: ``bench.retention`` measures what it costs)."""
    bits: dict[date, set[int]] = defaultdict(set)
    others: dict[date, set[str]] = defaultdict(set)
    ttls = _live_days(actives, now)
    for user, day in actives:
        if day not in ttls:
            continue
        offset = bitmap_offset(user)
        if offset is None:
            others[day].add(user)
        else:
            bits[day].add(offset)
    for day in bits.keys() | others.keys():
        bitmaps, hlls = _dated_keys(BITS, day, now), _dated_keys(HLLS, day, now)
        script_keys = [keys.tombstones("au"), *(key for key, _ in bitmaps), *(key for key, _ in hlls)]
        offsets = sorted(bits[day])
        args = [repr(now), *(ttl for _, ttl in bitmaps), len(offsets), *offsets, *sorted(others[day])]
        pipe.script(ACTIVES_RECORD, script_keys, args)
        if offsets:
            retention.queue_first_active(pipe, day, offsets, now)


def queue_visits(
    pipe: Pipeline,
    people: Collection[tuple[bytes, date]],
    anonymous: Collection[tuple[bytes, date]],
    now: float,
) -> list[int]:
    """Queue first-visit check-and-sets of every visit, one EVALSHA per (shard, day), and
    unique-visitor PFADDs of the anonymous ones (``people`` count through the active users);
    returns the first-visit reply indexes, whose replies are the new visitors."""
    groups: dict[tuple[int, date], dict[bytes, int]] = defaultdict(dict)
    per_day: dict[date, set[bytes]] = defaultdict(set)
    ttls = _live_days([*people, *anonymous], now)
    for visits, unique in ((people, False), (anonymous, True)):
        for visitor, day in visits:
            if day not in ttls:
                continue
            shard, partition = _home(visitor)
            groups[shard, day][visitor] = partition
            if unique:
                per_day[day].add(visitor)
    indexes = []
    for (shard, day), members in groups.items():
        hashes = [keys.visitor_seen(shard, partition) for partition in members.values()]
        script_keys = [keys.new_visitors(shard, day_name(day)), keys.tombstones(f"vis:{shard}"), *hashes]
        indexes.append(pipe.script(FIRST_VISIT, script_keys, [day_number(day), ttls[day], repr(now), *members]))
    for day, members in per_day.items():
        found = _dated_keys(UNIQUE, day, now)
        pipe.script(ADD_TO_PERIODS, [key for key, _ in found], ["hll", *(ttl for _, ttl in found), *members])
    return indexes


def queue_traffic(pipe: Pipeline, kind: str, day: date, now: float, requests: int = 1) -> None:
    """Queue HINCRBY of ``kind`` in ``day``'s hash by ``requests`` (and its TTL); nothing for a day
    out of retention."""
    ttl = day_ttl(day, now)
    if ttl > 0:
        key = keys.traffic(day_name(day))
        pipe.hincrby(key, kind, requests)
        pipe.expire(key, ttl)


# --- reads, one round trip each ---------------------------------------------------------------


def _queue_active(pipe: Pipeline, period: str, day: date) -> list[int]:
    """The reads whose replies sum to the period's active users: BITCOUNT in ranges of
    ``COUNT_CHUNK_BYTES``, so no command's work grows with the id space, and PFCOUNT."""
    index, name, first = PERIODS.index(period), name_of(period, day), len(pipe)
    for start in range(0, MAX_ID // 8 + 1, COUNT_CHUNK_BYTES):
        pipe.bitcount(BITS[index](name), start, start + COUNT_CHUNK_BYTES - 1)
    pipe.pfcount(HLLS[index](name))
    return list(range(first, len(pipe)))


def _queue_unique(pipe: Pipeline, period: str, day: date) -> list[int]:
    """The PFCOUNT of the anonymous unique visitors of the period holding ``day``."""
    pipe.pfcount(UNIQUE[PERIODS.index(period)](name_of(period, day)))
    return [len(pipe) - 1]


def _queue_traffic_read(pipe: Pipeline, day: date) -> int:
    pipe.hmget(keys.traffic(day_name(day)), list(NOT_PEOPLE))
    return len(pipe) - 1


@dataclass(frozen=True, slots=True)
class Today:
    """The day's, week's and month's figures as Redis holds them now."""

    online: int
    active: dict[str, int]  # by period
    anonymous: dict[str, int]  # unique anonymous visitors, by period
    new_visitors: int
    bots: int
    machines: int


def today(client: Client, day: date, online_since: float) -> Today:
    """Every figure of ``day`` and of its week and month, and the users seen since
    ``online_since``: one round trip of bounded commands."""
    pipe = client.pipeline(transaction=False)
    online_at = last_seen_store.queue_count_since(pipe, online_since)
    active_at = {period: _queue_active(pipe, period, day) for period in PERIODS}
    unique_at = {period: _queue_unique(pipe, period, day) for period in PERIODS}
    new_at = len(pipe)
    for shard in range(VISITOR_SHARDS):
        pipe.get(keys.new_visitors(shard, day_name(day)))
        pipe.get(keys.new_visitors_harvested(shard, day_name(day)))
    traffic_at = _queue_traffic_read(pipe, day)
    replies = pipe.execute()
    bots, machines = (int(count or 0) for count in replies[traffic_at])
    return Today(
        online=total(replies, online_at),
        active={period: total(replies, indexes) for period, indexes in active_at.items()},
        anonymous={period: total(replies, indexes) for period, indexes in unique_at.items()},
        new_visitors=total(replies, range(new_at, traffic_at)),
        bots=bots,
        machines=machines,
    )


@dataclass(frozen=True, slots=True)
class Harvest:
    """A day's figures for its rollup row."""

    active: int
    anonymous: int
    new_visitors: int
    bots: int
    machines: int


def harvest(client: Client, day: date, now: float) -> Harvest:
    """``day``'s figures, its new-visitor counters first harvested (GETDEL) into accumulators, so a
    rollup that dies before its database write loses nothing: a retry reads them again. One round trip."""
    pipe = client.pipeline(transaction=False)
    ttl, name = max(day_ttl(day, now), 1), day_name(day)
    new_at = [
        pipe.script(HARVEST_COUNTER, [keys.new_visitors(shard, name), keys.new_visitors_harvested(shard, name)], [ttl])
        for shard in range(VISITOR_SHARDS)
    ]
    active_at = _queue_active(pipe, "day", day)
    unique_at = _queue_unique(pipe, "day", day)
    traffic_at = _queue_traffic_read(pipe, day)
    replies = pipe.execute()
    bots, machines = (int(count or 0) for count in replies[traffic_at])
    return Harvest(
        active=total(replies, active_at),
        anonymous=total(replies, unique_at),
        new_visitors=total(replies, new_at),
        bots=bots,
        machines=machines,
    )
