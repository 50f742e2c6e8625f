"""One user's data across every key family: erase it (tombstoning the user where writes check), read
it for an export. Where it can be comes in as a ``Where``, worked out from the settings, so nothing
SCANs and the work is bounded by the retention, never by the number of users."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from activity.store import keys
from activity.store.client import Client
from activity.store.last_seen import partition_of
from activity.store.scripts import LuaScript, Pipeline

ERASE = LuaScript("erase")


@dataclass(frozen=True, slots=True)
class Where:
    """Where one user's data can be."""

    user: str
    bit: int | None  # the user's bit in the active-user bitmaps (None: counted by HyperLogLog)
    visitor_hash: str  # the first-visit partition hash holding the user's visitor id
    visitor_tombstones: str  # that partition's shard's tombstones
    visitor: bytes  # the user's visitor id (16 bytes)
    page_periods: Sequence[str]  # ``d:YYYYMMDD`` / ``w:YYYYWww`` whose page statistics may hold the user
    report_copies: Sequence[str]  # ranked report copies of those periods
    bitmaps: Sequence[str]  # active-user and cohort bitmaps of the retained days, weeks and months
    day_bitmaps: Sequence[tuple[str, str]]  # (day name, its bitmap), for the export's active days
    rate_counters: Sequence[str]  # throttle counters that may name the user (no hash tag: one DEL each)


def _queue_erase(
    pipe: Pipeline, tombstones: str, member: str | bytes, cleaned: Sequence[tuple[str, str]], now: float, until: float
) -> int:
    """Queue one ``erase.lua`` call: ``cleaned`` is (key, operation) pairs of one slot."""
    script_keys = [tombstones, *(key for key, _ in cleaned)]
    return pipe.script(ERASE, script_keys, [member, repr(now), repr(until), *(op for _, op in cleaned)])


def erase(client: Client, where: Where, now: float, until: float) -> tuple[int, list[str]]:
    """Erase the user everywhere but a running flush's claim (the flush settles it), tombstoned
    until ``until`` in each slot that checks. One round trip; returns (traces removed, ids of the
    groups whose views index the user). Drop those views after: a build reads the epoch before last
    seen, so one that read the user's last seen before this erase cannot publish past the bump."""
    user = where.user
    pv: list[tuple[str, str]] = [(keys.display_name(user), "name"), (keys.display_aliases(user), "aliases")]
    pv += [(keys.viewers_by_name(period), "byname") for period in where.page_periods]
    pv += [(keys.viewers_by_name_pending(period), "pending") for period in where.page_periods]
    pv += [(keys.top_viewers(period), "zrem") for period in where.page_periods]
    pv += [(keys.user_views(period, user), "del") for period in where.page_periods]
    pv += [(keys.session(user), "del"), (keys.recommendations(user), "del")]
    pv += [(key, "del") for copy in where.report_copies for key in (keys.report_rows(copy), keys.report_meta(copy))]
    au = [] if where.bit is None else [(bitmap, "bit") for bitmap in where.bitmaps] + [(keys.first_day(), "u16")]

    part = partition_of(user)
    ls = [(part.seen, "zrem"), (part.dirty, "zrem")]
    pipe = client.pipeline(transaction=False)
    calls = [
        _queue_erase(pipe, part.tombstones, user, ls, now, until),
        _queue_erase(pipe, keys.tombstones("pv"), user, pv, now, until),
        _queue_erase(pipe, keys.tombstones("au"), user, au, now, until),
        _queue_erase(pipe, where.visitor_tombstones, where.visitor, [(where.visitor_hash, "hdel")], now, until),
    ]
    for key in where.rate_counters:
        pipe.delete(key)
    pipe.smembers(keys.user_groups(user))
    results = pipe.execute()
    return sum(results[i] for i in calls), sorted(results[-1])


@dataclass(frozen=True, slots=True)
class Footprint:
    """Everything Redis holds about one user (bar HyperLogLog registers, which cannot tell)."""

    last_seen: float | None
    unflushed_since: float | None  # first change not yet in the database
    claimed_at: float | None  # claimed by a running flush at
    session: list[tuple[str, float]]  # (path, ts), oldest first
    session_expires_in: float | None
    display_name: str | None
    former_names: list[str]
    page_views: dict[str, int]  # period name -> the user's views
    groups: list[str]  # groups whose materialized views list the user
    active_days: list[str] | None  # YYYYMMDD; None when the user is counted by HyperLogLog
    first_visit_day: int | None  # day number (days since 1970-01-01) of the first visit ever
    first_active_day: int | None  # day number of the first activity (retention cohorts); None: none known
    tombstone: float | None  # when the user's tombstone in last seen expires (a recent erase)


def footprint(client: Client, where: Where) -> Footprint:
    """One round trip (a pipeline) of reads bounded by the retained periods."""
    user = where.user
    pipe = client.pipeline(transaction=False)
    part = partition_of(user)
    for key in (part.seen, part.dirty, part.claimed, part.tombstones):
        pipe.zscore(key, user)
    pipe.lrange(keys.session(user), 0, -1)
    pipe.pttl(keys.session(user))
    pipe.get(keys.display_name(user))
    pipe.smembers(keys.display_aliases(user))
    pipe.smembers(keys.user_groups(user))
    pipe.hget(where.visitor_hash, where.visitor)
    for period in where.page_periods:
        pipe.get(keys.user_views(period, user))
    if where.bit is not None:
        pipe.execute_command("BITFIELD", keys.first_day(), "GET", "u16", f"#{where.bit}")
        for _, bitmap in where.day_bitmaps:
            pipe.getbit(bitmap, where.bit)
    replies = pipe.execute()
    seen, dirty, claimed, tombstone, session, pttl, name, aliases, groups, first = replies[:10]
    views = replies[10 : 10 + len(where.page_periods)]
    bits = replies[10 + len(where.page_periods) :]
    first_active = None
    if where.bit is not None:
        first_active, bits = int(bits[0][0]) or None, bits[1:]
    entries = [json.loads(entry) for entry in session]
    return Footprint(
        last_seen=seen,
        unflushed_since=dirty,
        claimed_at=claimed,
        session=[(entry["path"], entry["ts"]) for entry in entries],
        session_expires_in=max(pttl, 0) / 1000 if entries else None,
        display_name=name,
        former_names=sorted(aliases),
        page_views={period: int(count) for period, count in zip(where.page_periods, views, strict=True) if count},
        groups=sorted(groups, key=int),
        active_days=None
        if where.bit is None
        else [day for (day, _), bit in zip(where.day_bitmaps, bits, strict=True) if bit],
        first_visit_day=None if first is None else int(first),
        first_active_day=first_active,
        tombstone=tombstone,
    )
