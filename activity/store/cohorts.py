"""Retention cohorts in Redis (docs/cohorts.md): each person's first active day, the per-day bitmaps
of first-active people, and the bitmap arithmetic that counts a cohort's people active in a later
period, all by dense id (``store.people``). Every key is tagged ``{au}``, the active-user bitmaps'
tag, so each BITOP reads one slot; every command reads a handful of bitmaps of a bit per person
(125 KB at a million people)."""

from __future__ import annotations

import json
import secrets
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from activity.calendar import EPOCH, day_name, day_number, name_of
from activity.store import families, keys, lifetimes, people
from activity.store.client import PER_CALL, Client, Sum, chunks, scan_steps
from activity.store.scripts import LuaScript, Pipeline

FIRST_ACTIVE = LuaScript("first_active")

ACTIVE_BITMAPS = {"day": keys.active_bits, "week": keys.active_bits_week}
BITOP_KEYS = 5  # bitmaps a BITOP reads (its destination among them): bounded work per command
SETBITS_PER_TRIP = 10_000  # SETBITs of an id list per pipeline
FIELD_GETS = 1000  # BITFIELD GETs per command
SCRATCH_MS = 60_000  # a dead build's scratch bitmaps go after this


def queue_first_active(pipe: Pipeline, day: date, digests: Sequence[bytes], now: float) -> Sum:
    """Queue ``first_active`` calls recording ``day`` as the first active day of each person (their
    digest; the dense id assigned by a call queued before) whose stored first day is later or
    unknown; returns how many became new firsts, once the pipeline has run. A day past the cohort
    bitmaps' retention sets the first-day field only."""
    ttl = max(lifetimes.cohort_ttl(day, now), 0)
    name = day_name(day)
    script_keys = [keys.dense_ids(), keys.first_day(), keys.first_active(name), keys.first_moved(name)]
    return Sum(
        pipe.script(FIRST_ACTIVE, script_keys, [day_number(day), ttl, *share]) for share in chunks(digests, PER_CALL)
    )


def cohort_bitmaps(days: Iterable[date]) -> list[str]:
    """The first-active and moved bitmaps of ``days``: where an erase clears a user's bit."""
    return [build(day_name(day)) for day in days for build in (keys.first_active, keys.first_moved)]


def first_days(client: Client, offsets: Sequence[int]) -> dict[int, int]:
    """The stored first day number of each dense id (0: none), ``FIELD_GETS`` per command."""
    found: dict[int, int] = {}
    pipe = client.pipeline(transaction=False)
    chunks = [offsets[i : i + FIELD_GETS] for i in range(0, len(offsets), FIELD_GETS)]
    for chunk in chunks:
        pipe.execute_command("BITFIELD", keys.first_day(), *(part for o in chunk for part in ("GET", "u16", f"#{o}")))
    for chunk, reply in zip(chunks, pipe.execute(), strict=True):
        found.update(zip(chunk, (int(value) for value in reply), strict=True))
    return found


def seed_first_days(client: Client, firsts: Mapping[str, date], now: float) -> int:
    """Record each user's first day (user id -> day) where it is earlier than the stored one, as the
    write path does (assigning dense ids where missing), and clear the bit a replaced later day's
    bitmap holds (a backfill can move a first day back by any distance, beyond the window cohort
    reads look at). Three round trips; returns how many first days moved back or were new."""
    dense = people.assign(client, list(firsts), now)
    stored = first_days(client, list(dense.values()))
    by_day: dict[date, list[bytes]] = defaultdict(list)
    for user, day in firsts.items():
        if user in dense:
            by_day[day].append(people.digest(user))
    pipe = client.pipeline(transaction=False)
    counted = [queue_first_active(pipe, day, sorted(digests), now) for day, digests in sorted(by_day.items())]
    for user, offset in dense.items():
        day, old = firsts[user], stored[offset]
        if old > day_number(day):
            replaced = EPOCH + timedelta(days=old)
            ttl = lifetimes.cohort_ttl(replaced, now)
            if ttl > 0:  # SETBIT may create the key (zeros): it gets the TTL its writers give
                pipe.setbit(keys.first_active(day_name(replaced)), offset, 0)
                pipe.expire(keys.first_active(day_name(replaced)), ttl)
    pipe.execute()
    return sum(firsts.value for firsts in counted)


@dataclass(frozen=True, slots=True)
class Cohort:
    """One cohort as the store builds it: the union of ``first_days``' first-active bitmaps less the
    people in ``moved_days``' moved bitmaps (their first day is earlier), or the people ``ids`` lists
    (dense ids); ``periods`` are the (``day`` or ``week``, a day in it) whose active users to count."""

    first_days: Sequence[date] = ()
    moved_days: Sequence[date] = ()
    ids: Sequence[int] | None = None
    periods: Sequence[tuple[str, date]] = ()


@dataclass(frozen=True, slots=True)
class Counted:
    size: int  # users in the cohort (and the group)
    retained: list[int]  # users of the cohort active in each of its periods


def have_active(client: Client, periods: Sequence[tuple[str, date]]) -> list[bool]:
    """Whether each (``day`` or ``week``, a day in it) has an active-user bitmap: one round trip."""
    pipe = client.pipeline(transaction=False)
    for period, day in periods:
        pipe.exists(ACTIVE_BITMAPS[period](name_of(period, day)))
    return [bool(found) for found in pipe.execute()] if periods else []


def _write_ids(client: Client, key: str, ids: Iterable[int]) -> None:
    """SETBIT each id into ``key`` (with a scratch TTL), ``SETBITS_PER_TRIP`` per round trip."""
    pipe = client.pipeline(transaction=False)
    pipe.delete(key)
    for offset in ids:
        pipe.setbit(key, offset, 1)
        if len(pipe) >= SETBITS_PER_TRIP:
            pipe.pexpire(key, SCRATCH_MS)
            pipe.execute()
    pipe.pexpire(key, SCRATCH_MS)
    pipe.execute()


def _bitop(pipe: Pipeline, op: str, dest: str, *sources: str) -> None:
    pipe.bitop(op, dest, *sources)
    pipe.pexpire(dest, SCRATCH_MS)


def count(client: Client, cohorts: Sequence[Cohort], group: int | None = None) -> list[Counted]:
    """Each cohort's size and its users active in each of its periods, restricted to the members of
    ``group`` (its membership bitmap, ``keys.group_members``) when given: one round trip per cohort
    (plus the id lists' SETBITs), each command a BITOP over at most ``BITOP_KEYS`` bitmaps or a
    BITCOUNT. Scratch bitmaps are deleted."""
    token = secrets.token_hex(8)
    cohort, mask, cell = (keys.cohort_scratch(token, name) for name in ("cohort", "mask", "cell"))
    scratch = [cohort, mask, cell]
    found: list[Counted] = []
    try:
        for spec in cohorts:
            if spec.ids is not None:
                _write_ids(client, cohort, spec.ids)
            pipe = client.pipeline(transaction=False)
            if spec.ids is None:
                pipe.delete(cohort)
                for chunk in chunks([keys.first_active(day_name(day)) for day in spec.first_days], BITOP_KEYS - 1):
                    _bitop(pipe, "OR", cohort, cohort, *chunk)
            moved = [keys.first_moved(day_name(day)) for day in spec.moved_days]
            if moved:
                pipe.delete(mask)
                for chunk in chunks(moved, BITOP_KEYS - 1):
                    _bitop(pipe, "OR", mask, mask, *chunk)
                # cohort AND NOT mask, as cohort XOR (cohort AND mask): BITOP NOT of a shorter mask
                # would end where the mask ends, and AND with it would drop the cohort's higher ids.
                _bitop(pipe, "AND", mask, mask, cohort)
                _bitop(pipe, "XOR", cohort, cohort, mask)
            if group is not None:
                _bitop(pipe, "AND", cohort, cohort, keys.group_members(group))
            size_at = len(pipe)
            pipe.bitcount(cohort)
            counts_at = []
            for period, day in spec.periods:
                _bitop(pipe, "AND", cell, cohort, ACTIVE_BITMAPS[period](name_of(period, day)))
                counts_at.append(len(pipe))
                pipe.bitcount(cell)
            replies = pipe.execute()
            found.append(Counted(size=int(replies[size_at]), retained=[int(replies[i]) for i in counts_at]))
    finally:
        client.delete(*scratch)
    return found


# --- the cached table ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredTable:
    body: dict[str, Any]
    pttl_ms: int


def read_table(client: Client, table_id: str) -> StoredTable | None:
    """The cached table and the milliseconds it still lives, or None: one round trip."""
    pipe = client.pipeline(transaction=False)
    pipe.get(keys.retention_table(table_id))
    pipe.pttl(keys.retention_table(table_id))
    raw, pttl = pipe.execute()
    return None if raw is None else StoredTable(json.loads(raw), int(pttl))


def table_pttl_ms(client: Client, table_id: str) -> int:
    return int(client.pttl(keys.retention_table(table_id)))


def write_table(client: Client, table_id: str, body: Mapping[str, Any], keep_ms: int) -> None:
    client.set(keys.retention_table(table_id), json.dumps(body, separators=(",", ":")), px=keep_ms)


def drop_tables(client: Client) -> int:
    """Delete every cached table, a SCAN step and a DEL at a time; returns how many there were."""
    pattern = families.match_pattern(keys.retention_table("*"))
    dropped = 0
    for found in scan_steps(client, pattern, 1000):
        if found:
            dropped += client.delete(*found)
    return dropped
