"""Audience figures per day, ISO week and month (docs/visitors.md), each written into the three
periods' keys at once, so no read is a union over days:

- active users: a bitmap by dense id (``store.people``: exact and erasable, whatever the user id);
- first visit ever: a hash per shard and generation of days, counted per day in the same script;
- unique visitors: a HyperLogLog of anonymous ids; signed-in visitors are the active users;
- requests that were not people's: a hash a day, by kind.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import date

from activity.calendar import PERIODS, day_name, day_number, day_of, last_day, name_of
from activity.store import cohorts, keys, lifetimes, people
from activity.store import last_seen as last_seen_store
from activity.store.client import PER_CALL, Client, Reply, Sum, chunks
from activity.store.lifetimes import day_ttl
from activity.store.scripts import LuaScript, Pipeline

ADD_TO_PERIODS = LuaScript("add_to_periods")
FIRST_VISIT = LuaScript("first_visit")
HARVEST_COUNTER = LuaScript("harvest_counter")
MERGE_VISITORS = LuaScript("merge_visitors")

BITS = (keys.active_bits, keys.active_bits_week, keys.active_bits_month)
UNIQUE = (keys.unique_visitors, keys.unique_visitors_week, keys.unique_visitors_month)
COUNT_CHUNK_BYTES = 1 << 20  # one BITCOUNT reads at most 1 MiB (8M people)
# The reads count dense ids up to this (MAX_PEOPLE / 8 bytes a bitmap at most, in COUNT_CHUNK_BYTES).
MAX_PEOPLE = 2**26
# The legacy "first visit ever" hashes (before generations) had 2**PARTITION_BITS partitions: an
# erase still names a user's one (docs/visitors.md).
PARTITION_BITS = 17
# Entries a legacy hash's merge moves in one call: those hashes were listpacks of a few ids (at most
# hash-max-listpack-entries: 128 by default, 512 as the docs recommended), so one call empties one.
MERGE_STEP = 512
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


def user_visitor_id(user: str) -> bytes:
    """A signed-in user's visitor id: 128 bits derived from the user id, so the user keeps it."""
    return hashlib.blake2b(b"user\0" + user.encode(), digest_size=16).digest()


def _home(visitor: bytes) -> tuple[int, int]:
    """(shard, partition) of a visitor id: partition = low ``PARTITION_BITS`` bits, shard = its low bits."""
    partition = int.from_bytes(visitor, "big") & ((1 << PARTITION_BITS) - 1)
    return partition % VISITOR_SHARDS, partition


def shard_of(visitor: bytes) -> int:
    """The shard (hash tag ``{vis:N}``) of a visitor id's keys."""
    return _home(visitor)[0]


def _generations(shard: int, day: date) -> list[str]:
    """The shard's hashes an id may be in on ``day``: each live generation's, the newest first."""
    return [keys.visitor_generation(shard, generation) for generation in lifetimes.VISITORS.live(day)]


def visitor_home(visitor: bytes, day: date) -> tuple[list[str], str]:
    """(the hashes that may hold ``visitor`` on ``day``: its shard's live generations, newest first,
    then its legacy hash, not merged yet if the sweep has not run since the upgrade; its shard's
    tombstones): where an erase and an export look."""
    shard, partition = _home(visitor)
    return [*_generations(shard, day), keys.visitor_seen(shard, partition)], keys.tombstones(f"vis:{shard}")


# --- writes, queued on the caller's pipeline (a batch's one round trip) ------------------------


def queue_actives(pipe: Pipeline, actives: Collection[tuple[str, date]], now: float) -> None:
    """Queue, per day of the batch, EVALSHAs (``PER_CALL`` users each) setting each user's
    bit (at their dense id, assigned in the same call for a new person) in the active-user bitmaps of
    the day, its week and its month, and then the ``first_active`` calls recording the day as the
    first of those seen for the first time."""
    by_day: dict[date, set[bytes]] = defaultdict(set)
    ttls = _live_days(actives, now)
    for user, day in actives:
        if day in ttls:
            by_day[day].add(people.digest(user))
    for day, found in by_day.items():
        digests, bitmaps = sorted(found), _dated_keys(BITS, day, now)
        for share in chunks(digests, PER_CALL):
            people.queue_assign(pipe, share, now, bitmaps)
        cohorts.queue_first_active(pipe, day, digests, now)


def queue_visits(
    pipe: Pipeline,
    signed_in: Collection[tuple[bytes, date]],
    anonymous: Collection[tuple[bytes, date]],
    now: float,
) -> Sum:
    """Queue first-visit check-and-sets of every visit, one EVALSHA per (shard, day), and
    unique-visitor PFADDs of the anonymous ones (``signed_in`` visitors count through the active users);
    returns the new visitors, once the pipeline has run. An id goes into the current generation
    (the one of ``now``'s day, whatever the visit's), so it is remembered from its latest recorded visit."""
    groups: dict[tuple[int, date], set[bytes]] = defaultdict(set)
    per_day: dict[date, set[bytes]] = defaultdict(set)
    ttls = _live_days([*signed_in, *anonymous], now)
    for visits, unique in ((signed_in, False), (anonymous, True)):
        for visitor, day in visits:
            if day not in ttls:
                continue
            groups[_home(visitor)[0], day].add(visitor)
            if unique:
                per_day[day].add(visitor)
    today = day_of(now)
    kept = lifetimes.VISITORS.ttl(lifetimes.VISITORS.of(today), now)
    new = Sum()
    for (shard, day), members in groups.items():
        counter, tombstones = keys.new_visitors(shard, day_name(day)), keys.tombstones(f"vis:{shard}")
        script_keys = [counter, tombstones, *_generations(shard, today)]
        args = [day_number(day), ttls[day], repr(now), kept, *sorted(members)]
        new.replies.append(pipe.script(FIRST_VISIT, script_keys, args))
    for day, members in per_day.items():
        found = _dated_keys(UNIQUE, day, now)
        pipe.script(ADD_TO_PERIODS, [key for key, _ in found], [*(ttl for _, ttl in found), *members])
    return new


def queue_merge_legacy(pipe: Pipeline, legacy: str, shard: int, now: float) -> Reply:
    """Queue the merge of a legacy first-visit hash (``keys.visitor_seen`` of ``shard``) into the
    shard's current generation, at most ``MERGE_STEP`` entries, an id in both keeping the earlier
    day; returns its reply: the entries the hash has left (0: merged and deleted)."""
    generation = lifetimes.VISITORS.of(day_of(now))
    current = keys.visitor_generation(shard, generation)
    return pipe.script(MERGE_VISITORS, [legacy, current], [lifetimes.VISITORS.ttl(generation, now), MERGE_STEP])


def queue_traffic(pipe: Pipeline, kind: str, day: date, now: float, requests: int = 1) -> None:
    """Queue HINCRBY of ``kind`` in ``day``'s hash by ``requests`` (and its TTL); nothing for a day
    out of retention."""
    ttl = day_ttl(day, now)
    if ttl > 0:
        key = keys.traffic(day_name(day))
        pipe.hincrby(key, kind, requests)
        pipe.expire(key, ttl)


# --- reads, one round trip each ---------------------------------------------------------------


def _queue_active(pipe: Pipeline, period: str, day: date) -> Sum:
    """The period's active users: BITCOUNT in ranges of ``COUNT_CHUNK_BYTES``, so no command's work
    grows with the number of people."""
    index, name, counts = PERIODS.index(period), name_of(period, day), Sum()
    for start in range(0, MAX_PEOPLE // 8 + 1, COUNT_CHUNK_BYTES):
        pipe.bitcount(BITS[index](name), start, start + COUNT_CHUNK_BYTES - 1)
        counts.replies.append(pipe.reply())
    return counts


def _queue_unique(pipe: Pipeline, period: str, day: date) -> Reply:
    """The PFCOUNT of the anonymous unique visitors of the period holding ``day``."""
    pipe.pfcount(UNIQUE[PERIODS.index(period)](name_of(period, day)))
    return pipe.reply()


def _queue_traffic_read(pipe: Pipeline, day: date) -> Reply:
    pipe.hmget(keys.traffic(day_name(day)), list(NOT_PEOPLE))
    return pipe.reply()


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
    online = last_seen_store.queue_count_since(pipe, online_since)
    active = {period: _queue_active(pipe, period, day) for period in PERIODS}
    unique = {period: _queue_unique(pipe, period, day) for period in PERIODS}
    new = Sum()
    for shard in range(VISITOR_SHARDS):
        for counter in (keys.new_visitors(shard, day_name(day)), keys.new_visitors_harvested(shard, day_name(day))):
            pipe.get(counter)
            new.replies.append(pipe.reply())
    traffic = _queue_traffic_read(pipe, day)
    pipe.execute()
    bots, machines = (int(count or 0) for count in traffic.value)
    return Today(
        online=online.value,
        active={period: counts.value for period, counts in active.items()},
        anonymous={period: int(count.value) for period, count in unique.items()},
        new_visitors=new.value,
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
    new = Sum(
        pipe.script(HARVEST_COUNTER, [keys.new_visitors(shard, name), keys.new_visitors_harvested(shard, name)], [ttl])
        for shard in range(VISITOR_SHARDS)
    )
    active = _queue_active(pipe, "day", day)
    unique = _queue_unique(pipe, "day", day)
    traffic = _queue_traffic_read(pipe, day)
    pipe.execute()
    bots, machines = (int(count or 0) for count in traffic.value)
    return Harvest(
        active=active.value,
        anonymous=int(unique.value),
        new_visitors=new.value,
        bots=bots,
        machines=machines,
    )
