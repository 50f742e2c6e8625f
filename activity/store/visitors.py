"""Visitors: first visit ever and unique visitors per day.

- First visit ever: one HSETNX per visitor into partitioned hashes (partition = low bits of the
  128-bit id, field = the 16 raw bytes), counted per day and shard by the same Lua call; the
  counters are harvested with GETDEL into per-day accumulators (``bench/membership.py`` measured
  the structure against flat keys, sets and sorted sets).
- Unique visitors per day, ISO week and month: a HyperLogLog of anonymous visitor ids each, all
  three written by the same visit, so a period's figure is one PFCOUNT, plus the period's active
  users (signed-in visitors are exactly the active users, counted in bitmaps that can forget one:
  no HyperLogLog holds a signed-in user who has an integer id, see docs/privacy.md).

Per-day keys live as every per-day audience key does (``activity.store.daily``).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Collection
from datetime import date

from activity.calendar import PERIODS, day_name, day_number, name_of
from activity.store import keys
from activity.store.daily import day_ttl, live_days, queue_add
from activity.store.scripts import LuaScript, Pipeline

FIRST_VISIT = LuaScript("first_visit")
HARVEST_COUNTER = LuaScript("harvest_counter")

UNIQUE = (keys.unique_visitors, keys.unique_visitors_week, keys.unique_visitors_month)
VISITOR_SHARDS = 16  # hash tags {vis:0}..{vis:15}; changing it re-homes every id, so it is fixed


def user_visitor_id(user: str) -> bytes:
    """A signed-in user's visitor id: 128 bits derived from the user id, so the user keeps it."""
    return hashlib.blake2b(b"user\0" + user.encode(), digest_size=16).digest()


def _home(visitor: bytes, bits: int) -> tuple[int, int]:
    """(shard, partition) of a visitor id: partition = low ``bits`` bits, shard = its low bits."""
    partition = int.from_bytes(visitor, "big") & ((1 << bits) - 1)
    return partition % VISITOR_SHARDS, partition


def visitor_home(visitor: bytes, partition_bits: int) -> tuple[str, str]:
    """(the partition hash holding ``visitor``, its shard's tombstones): where an erase looks."""
    shard, partition = _home(visitor, partition_bits)
    return keys.visitor_seen(shard, partition), keys.tombstones(f"vis:{shard}")


def queue_visits(
    pipe: Pipeline,
    people: Collection[tuple[bytes, date]],
    anonymous: Collection[tuple[bytes, date]],
    now: float,
    partition_bits: int,
) -> list[int]:
    """Queue first-visit check-and-sets of every visit and unique-visitor PFADDs of the anonymous
    ones (signed-in ``people`` count as unique visitors through the active users); returns the
    first-visit reply indexes. One EVALSHA per (shard, day) in the batch, each reply the number of
    new visitors in it. Tombstoned ids (erased users') are skipped by the script.
    """
    groups: dict[tuple[int, date], dict[bytes, int]] = defaultdict(dict)
    per_day: dict[date, set[bytes]] = defaultdict(set)
    ttls = live_days([*people, *anonymous], now)
    for visits, unique in ((people, False), (anonymous, True)):
        for visitor, day in visits:
            if day not in ttls:
                continue
            shard, partition = _home(visitor, partition_bits)
            groups[shard, day][visitor] = partition
            if unique:
                per_day[day].add(visitor)
    indexes = []
    for (shard, day), members in groups.items():
        hashes = [keys.visitor_seen(shard, partition) for partition in members.values()]
        script_keys = [keys.new_visitors(shard, day_name(day)), keys.tombstones(f"vis:{shard}"), *hashes]
        indexes.append(pipe.script(FIRST_VISIT, script_keys, [day_number(day), ttls[day], repr(now), *members]))
    for day, members in per_day.items():
        queue_add(pipe, UNIQUE, day, now, "hll", members)
    return indexes


def queue_unique(pipe: Pipeline, period: str, day: date) -> list[int]:
    """Queue the PFCOUNT of the anonymous unique visitors of the ``day``, ``week`` or ``month``
    holding ``day`` (add the period's active users for every visitor)."""
    return [pipe.pfcount(UNIQUE[PERIODS.index(period)](name_of(period, day)))]


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
