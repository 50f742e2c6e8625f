"""One user's data across every key family: erase it (tombstoning the user where writes check), read
it for an export. Where it can be comes in as a ``Where``, worked out from the settings, so nothing
SCANs and the work is bounded by the retention, never by the number of users."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from activity import calendar
from activity.store import audience, funnel_progress, funnels, keys, pages_now, sessions
from activity.store.client import Client, Sum
from activity.store.groups import entry_ids, index_key
from activity.store.last_seen import partition_of
from activity.store.scripts import LuaScript, Pipeline

ZERO_FIELD = LuaScript("zero_field")


@dataclass(frozen=True, slots=True)
class Where:
    """Where one user's data can be."""

    user: str
    digest: bytes  # the user's name in the dense id map (``store.people``) and in {au}'s tombstones
    visitor_hashes: Sequence[str]  # the first-visit hashes that may hold the user's visitor id
    visitor_tombstones: str  # the visitor id's shard's tombstones
    visitor: bytes  # the user's visitor id (16 bytes)
    page_periods: Sequence[str]  # ``d:YYYYMMDD`` / ``w:YYYYWww`` whose page statistics may hold the user
    report_copies: Sequence[str]  # ranked report copies of those periods
    bitmaps: Sequence[str]  # active-user and cohort bitmaps of the retained days, weeks and months
    day_bitmaps: Sequence[tuple[str, str]]  # (day name, its bitmap), for the export's active days
    rate_counters: Sequence[str]  # throttle counters that may name the user (no hash tag: one DEL each)
    person: str  # the user as funnels name people (``u:<user>``)
    progress: funnels.Home  # where the user's funnel progress can be


def _queue_tombstone(pipe: Pipeline, tombstones: str, member: str | bytes, now: float, until: float) -> None:
    """Tombstone ``member`` until ``until`` in the slot of ``tombstones``, whose writes look it up and
    skip the member: the set drops its expired members and lives as long as its latest."""
    lifetime = math.ceil(until - now)
    pipe.zremrangebyscore(tombstones, "-inf", now)
    pipe.zadd(tombstones, {member: until}, gt=True)
    pipe.expire(tombstones, lifetime, nx=True)  # a set just made
    pipe.expire(tombstones, lifetime, gt=True)  # one that would go before this tombstone


def erase(client: Client, where: Where, now: float, until: float) -> tuple[int, list[str]]:
    """Erase the user everywhere but a running flush's claim (the flush settles it), tombstoned
    until ``until`` in each slot that checks; returns (traces removed: keys deleted, members
    removed, bits cleared; ids of the groups whose views index the user). Drop those views after: a
    build reads the epoch before last seen, so one that read the user's last seen before this erase
    cannot publish past the bump.

    Two round trips. The first tombstones the user in every slot, then reads what names the rest
    (display names, dense id, linked visitors, groups); the second removes. Every write of those
    slots skips a tombstoned user, so what the first read cannot change before the second: the
    removals are plain commands, each in any order after the tombstones."""
    user = where.user
    part = partition_of(user)
    progress = where.progress
    pipe = client.pipeline(transaction=False)
    for tombstones, member in (
        (progress.tombstones, where.person),
        (pages_now.tombstones_key(), where.person),
        (part.tombstones, user),
        (keys.tombstones("ses"), user),
        (keys.tombstones("pv"), user),
        (keys.tombstones("au"), where.digest),
        (where.visitor_tombstones, where.visitor),
        *((keys.tombstones(sessions.path_tag(n)), user) for n in range(sessions.PATH_PARTITIONS)),
    ):
        _queue_tombstone(pipe, tombstones, member, now, until)
    pipe.hgetall(keys.viewer(user))
    viewer = pipe.reply()
    pipe.smembers(keys.former_display_aliases(user))
    former = pipe.reply()
    pipe.hget(keys.dense_ids(), where.digest)
    dense = pipe.reply()
    pipe.zrange(keys.linked_visitors(user), 0, -1)
    visitors = pipe.reply()
    pipe.hget(index_key(user), user)
    groups = pipe.reply()
    pipe.execute()

    # Each by-name entry the user can have: under every name they went by, and under their id.
    display = viewer.value.get(keys.VIEWER_NAME)
    names = {user, *([display] if display else []), *_former_names(viewer.value, former.value)}
    entries = [f"{name}\0{user}" for name in names]
    gone: list[tuple[Any, ...]] = [("ZREM", part.seen, user), ("ZREM", part.dirty, user), *progress.removals()]
    for period in where.page_periods:
        gone.append(("ZREM", keys.viewers_by_name(period), *entries))
        gone.append(("SREM", keys.viewers_by_name_pending(period), *entries))
        gone.append(("ZREM", keys.top_viewers(period), user))
    per_user = [keys.viewer(user), keys.former_display_aliases(user), keys.session(user), keys.recommendations(user)]
    per_user.append(keys.linked_visitors(user))
    per_user += [key for copy in where.report_copies for key in (keys.report_rows(copy), keys.report_meta(copy))]
    gone += [("DEL", key) for key in (*per_user, *where.rate_counters)]
    gone += [("HDEL", key, where.visitor) for key in where.visitor_hashes]
    if dense.value is not None:
        gone.append(("HDEL", keys.dense_ids(), where.digest))
    tombstoned, linked_gone = _linked_visitors(visitors.value, now)
    for tombstones, member in tombstoned:
        _queue_tombstone(pipe, tombstones, member, now, until)
    removed = [pages_now.queue_forget(pipe, where.person)]
    for command in (*gone, *linked_gone):
        pipe.execute_command(*command)
        removed.append(pipe.reply())
    if dense.value is not None:
        removed += [pipe.script(ZERO_FIELD, [bitmap], ["u1", dense.value]) for bitmap in where.bitmaps]
        removed.append(pipe.script(ZERO_FIELD, [keys.first_day()], ["u16", dense.value]))
    pipe.execute()
    return Sum(removed).value, sorted(entry_ids(groups.value))


def _former_names(fields: Iterable[str], former: Iterable[str]) -> set[str]:
    """The user's former display names: their views hash's ``keys.VIEWER_FORMER`` fields, and the set
    an earlier release kept them in (``keys.former_display_aliases``), until it expires."""
    prefix = keys.VIEWER_FORMER
    return {field.removeprefix(prefix) for field in fields if field.startswith(prefix)} | set(former)


def _linked_visitors(
    visitors: Sequence[str], now: float
) -> tuple[list[tuple[str, bytes | str]], list[tuple[Any, ...]]]:
    """The visitors linked to an erased user (at most ``services.signin.MAX_LINKED``): where each is
    tombstoned (tombstones, member), and the commands that remove its link, session, first visit and
    funnel progress."""
    tombstoned: list[tuple[str, bytes | str]] = []
    gone: list[tuple[Any, ...]] = []
    for visitor in visitors:
        raw = bytes.fromhex(visitor)
        shard = audience.shard_of(raw)
        hashes, tombstones = audience.visitor_home(raw, calendar.day_of(now))
        person = funnels.visitor_person(visitor)
        progress = funnels.person_home(person, now)
        tombstoned += [(tombstones, raw), (progress.tombstones, person)]
        gone += [("DEL", key) for key in (keys.visitor_link(shard, visitor), keys.visitor_session(shard, visitor))]
        gone += [("HDEL", key, raw) for key in hashes]
        gone += progress.removals()
    return tombstoned, gone


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
    dense_id: int | None  # the user's dense id (their bit in the {au} bitmaps); None: none assigned
    active_days: list[str]  # YYYYMMDD
    first_visit_day: int | None  # day number (days since 1970-01-01) of the first visit ever
    first_active_day: int | None  # day number of the first activity (retention cohorts); None: none known
    tombstone: float | None  # when the user's tombstone in last seen expires (a recent erase)
    funnels: dict[str, Any]  # the user's progress in the funnels (``funnel_progress.exported``)
    page_now: tuple[str, float] | None  # (path, ts) of the latest page view while online
    visitors: list[tuple[str, float]]  # (visitor id, when linked) of the visitors that signed in as the user


def footprint(client: Client, where: Where) -> Footprint:
    """Reads bounded by the retained periods: one round trip, and a second for the bits at the
    user's dense id when they have one."""
    user = where.user
    pipe = client.pipeline(transaction=False)
    part = partition_of(user)
    for key in (part.seen, part.dirty, part.claimed, part.tombstones):
        pipe.zscore(key, user)
    pipe.lrange(keys.session(user), 0, -1)
    pipe.pttl(keys.session(user))
    pipe.hgetall(keys.viewer(user))
    pipe.hget(index_key(user), user)
    for key in where.visitor_hashes:
        pipe.hget(key, where.visitor)
    pipe.hget(keys.dense_ids(), where.digest)
    pipe.hget(keys.now_page(), where.person)
    pipe.zscore(keys.now_latest(), where.person)
    pipe.zrange(keys.linked_visitors(user), 0, -1, withscores=True)
    linked = pipe.reply()
    progress = []
    for generation in where.progress.generations:
        pipe.hget(generation, where.person)
        progress.append(pipe.reply())
    pipe.get(where.progress.former)
    progress.append(pipe.reply())
    pipe.smembers(keys.former_display_aliases(user))
    former = pipe.reply()
    replies = pipe.execute()
    seen, dirty, claimed, tombstone, session, pttl, viewer, groups = replies[:8]
    visits = 8 + len(where.visitor_hashes)
    first = next((day for day in replies[8:visits] if day is not None), None)
    dense, page_now, page_now_ts = replies[visits : visits + 3]
    state = next((read.value for read in progress if read.value is not None), None)
    first_active, bits = None, [0] * len(where.day_bitmaps)
    if dense is not None:
        dense = int(dense)
        pipe.execute_command("BITFIELD", keys.first_day(), "GET", "u16", f"#{dense}")
        for _, bitmap in where.day_bitmaps:
            pipe.getbit(bitmap, dense)
        (field, *bits) = pipe.execute()
        first_active = int(field[0]) or None
    entries = [sessions.entry_view(row) for row in session]
    return Footprint(
        last_seen=seen,
        unflushed_since=dirty,
        claimed_at=claimed,
        session=entries,
        session_expires_in=max(pttl, 0) / 1000 if entries else None,
        display_name=viewer.get(keys.VIEWER_NAME),
        former_names=sorted(_former_names(viewer, former.value)),
        page_views={period: int(viewer[period]) for period in where.page_periods if viewer.get(period)},
        groups=sorted(entry_ids(groups), key=int),
        dense_id=dense,
        active_days=[day for (day, _), bit in zip(where.day_bitmaps, bits, strict=True) if bit],
        first_visit_day=None if first is None else int(first),
        first_active_day=first_active,
        tombstone=tombstone,
        funnels=funnel_progress.exported(state),
        page_now=None if page_now is None else (page_now, page_now_ts),
        visitors=[(visitor, when) for visitor, when in linked.value],
    )
