"""Funnel progress and counts (docs/funnels.md): each person's progress in every funnel is one string,
advanced by ``lua/funnel_advance.lua`` with a batch's page views, and reaching a step adds the
person to the counts of the entry's day, week and month. People are spread over ``PARTITIONS``
hash tags, so a Cluster spreads the calls; a read sums the partitions in one round trip."""

from __future__ import annotations

import json
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from activity import calendar
from activity.calendar import DAY_SECONDS
from activity.funnel_rules import MAX_WINDOW
from activity.store import keys
from activity.store.client import PER_CALL, Client, Reply, Sum, chunks
from activity.store.lifetimes import KEEP_DAYS
from activity.store.scripts import LuaScript, Pipeline

ADVANCE = LuaScript("funnel_advance")

PARTITIONS = 16  # hash tags {fn:0}..{fn:15}; changing it re-homes every person, so it is fixed
# A person's progress lives the longest window of the funnels plus this many days after the latest
# view a funnel took: the longest month, so the person counts once in it, and a day of margin.
STATE_DAYS = 32


@dataclass(frozen=True, slots=True)
class Funnel:
    """What the store needs of a funnel's definition."""

    id: int
    strict: bool
    window: int  # seconds
    steps: int


@dataclass(frozen=True, slots=True)
class View:
    """A person's page view: ``matches`` are the (funnel id, step) pairs its path matches (none: it
    still ends the strict funnels' chains and is the person's latest view)."""

    person: str  # "u:<user>" or "v:<visitor>"
    ts: float
    matches: tuple[tuple[int, int], ...]


def visitor_person(visitor: str) -> str:
    """A visitor as funnels name people (a user is ``u:<user>``)."""
    return f"v:{visitor}"


def partition_of(person: str) -> int:
    """CRC-32 of the person's id, the same in every process and release."""
    return zlib.crc32(person.encode()) % PARTITIONS


def months_between(first: date, last: date) -> list[date]:
    """The first days of the months from ``first``'s to ``last``'s."""
    found, month = [], first.replace(day=1)
    while month <= last:
        found.append(month)
        month = (month + timedelta(days=32)).replace(day=1)
    return found


def period_key(period: str, day: date) -> str:
    """The ``day``, ``week`` or ``month`` holding ``day`` as the counts' fields name it (``d:YYYYMMDD``,
    ``w:YYYYWww``, ``m:YYYYMM``)."""
    return f"{period[0]}:{calendar.name_of(period, day)}"


def counts_ttl(month: date, now: float) -> int:
    """Seconds the counts of ``month``'s entries live at ``now``: the month, the longest window a
    funnel may have (its last entries still move on) and ``KEEP_DAYS`` for the rollup to read them."""
    return max(calendar.seconds_left(calendar.last_day("month", month), KEEP_DAYS + MAX_WINDOW // DAY_SECONDS, now), 1)


def queue_advance(pipe: Pipeline, funnels: Sequence[Funnel], views: Sequence[View], now: float) -> Sum:
    """Queue one script call per partition (and ``PER_CALL`` people) the views touch, views in
    arrival order; returns how many step counts they added, once the pipeline has run."""
    by_partition: dict[int, dict[str, list[View]]] = defaultdict(dict)
    for view in views:
        by_partition[partition_of(view.person)].setdefault(view.person, []).append(view)
    number = {funnel.id: n for n, funnel in enumerate(funnels, 1)}
    longest = max(funnel.window for funnel in funnels)
    head: list[str | int] = []
    for funnel in funnels:
        head += [funnel.id, "strict" if funnel.strict else "sequential", funnel.window, funnel.steps]
    added = Sum()
    for partition, people in by_partition.items():
        for group in chunks(people.items(), PER_CALL):
            call_views = [view for _, own in group for view in own]
            days = sorted({calendar.day_of(view.ts) for view in call_views})
            # Entries still moving on began at most a window before the call's first view.
            months = months_between(calendar.day_of(min(view.ts for view in call_views) - longest), days[-1])
            day_number = {day: n for n, day in enumerate(days, 1)}
            args: list[str | int] = [repr(now), longest + STATE_DAYS * DAY_SECONDS]
            args += [len(funnels), len(group), len(months), len(days), *head]
            for month in months:
                args += [period_key("month", month), counts_ttl(month, now)]
            for day in days:
                args += [period_key(period, day) for period in calendar.PERIODS]
            args += [person for person, _ in group]
            for index, (_, own) in enumerate(group, 1):
                for view in own:
                    matches = " ".join(f"{number[funnel]}.{step}" for funnel, step in view.matches)
                    args += [index, repr(view.ts), day_number[calendar.day_of(view.ts)], matches]
            script_keys = [keys.tombstones(f"fn:{partition}")]
            script_keys += [keys.funnel_state(partition, person) for person, _ in group]
            script_keys += [keys.funnel_counts(partition, calendar.month_name(month)) for month in months]
            added.replies.append(pipe.script(ADVANCE, script_keys, args))
    return added


def period_months(period: str, start: date) -> list[date]:
    """The months whose entries can count in the ``period`` (day, week, month) starting ``start``."""
    last = start if period == "day" else calendar.last_day(period, start)
    return months_between(start, last)


def counts(client: Client, funnel: Funnel, period: str, start: date) -> list[int]:
    """People counted at each step (1..``funnel.steps``) in the period starting ``start``: one
    HMGET per partition and month, one round trip."""
    name = period_key(period, start)
    fields = [f"{funnel.id}:{name}:{step}" for step in range(1, funnel.steps + 1)]
    pipe = client.pipeline(transaction=False)
    for partition in range(PARTITIONS):
        for month in period_months(period, start):
            pipe.hmget(keys.funnel_counts(partition, calendar.month_name(month)), fields)
    totals = [0] * funnel.steps
    for found in pipe.execute():
        for step, value in enumerate(found):
            totals[step] += int(value or 0)
    return totals


def progress(state: str | None) -> dict[str, Any]:
    """A person's state (``funnel_advance.lua``'s) as an export shows it: the latest view taken and,
    per funnel, the steps counted in each period and the chains in progress."""
    if not state:
        return {"latest_view": None, "progress": []}
    latest, _, found = state.split("|", 2)
    return {
        "latest_view": float(latest),
        "progress": [
            {"funnel": int(funnel), "counted": entry["p"] or {}, "in_progress": entry["c"] or []}
            for funnel, entry in sorted(json.loads(found).items(), key=lambda item: int(item[0]))
        ],
    }


def person_keys(person: str) -> tuple[str, str]:
    """(the person's state, the tombstones of its partition): what an erase and an export name."""
    partition = partition_of(person)
    return keys.funnel_state(partition, person), keys.tombstones(f"fn:{partition}")


# --- a sign-in: the visitor's progress continues as the user's (docs/funnels.md#signing-in) -----

REPLACE = LuaScript("funnel_replace")


@dataclass(slots=True)
class Merge:
    """The two people's states as read (``queue_read``), then what the merge did."""

    visitor: str  # "v:<visitor>"
    user: str  # "u:<user>"
    visitor_state: Reply
    visitor_ttl: Reply  # milliseconds (PTTL)
    user_state: Reply
    user_ttl: Reply
    replaced: Reply | None = None

    @property
    def value(self) -> str:
        """``none`` (the visitor had no progress), ``merged``, ``retry`` (the user's state changed
        since it was read) or ``erased`` (the user is tombstoned)."""
        if self.replaced is None:
            return "none"
        return {1: "merged", 0: "retry"}.get(self.replaced.value, "erased")


def queue_read(pipe: Pipeline, visitor: str, user: str) -> Merge:
    """Queue the reads of both people's states and TTLs (two tags: plain commands, no script)."""
    found = []
    for person in (visitor, user):
        state = person_keys(person)[0]
        pipe.get(state)
        found.append(pipe.reply())
        pipe.pttl(state)
        found.append(pipe.reply())
    return Merge(visitor, user, *found)


def merge_states(user: str | None, visitor: str | None) -> str | None:
    """The user's state with the visitor's folded in; None when the visitor has none. Per funnel:
    the chains in progress of both (per level and day of entry the latest entry, as
    ``funnel_advance.lua`` keeps one person's), and per period the higher step counted, so the merged
    person is never counted again at a step either was counted at; the latest view taken is the
    later of the two."""
    if not visitor:
        return None
    if not user:
        return visitor
    (user_t, user_ids, user_raw), (visitor_t, visitor_ids, visitor_raw) = user.split("|", 2), visitor.split("|", 2)
    merged: dict[str, Any] = json.loads(user_raw) or {}
    for funnel, theirs in (json.loads(visitor_raw) or {}).items():
        ours = merged.get(funnel)
        if not ours:
            merged[funnel] = theirs
            continue
        counted = dict(ours.get("p") or {})
        for period, step in (theirs.get("p") or {}).items():
            counted[period] = max(counted.get(period, 0), step)
        latest: dict[tuple[Any, Any], list[Any]] = {}
        for chain in [*(ours.get("c") or []), *(theirs.get("c") or [])]:
            slot = (chain[0], chain[2])
            if slot not in latest or latest[slot][1] < chain[1]:
                latest[slot] = chain
        merged[funnel] = {"p": counted or {}, "c": list(latest.values())}
    t = user_t if float(user_t) >= float(visitor_t) else visitor_t
    ids = sorted({*user_ids.strip(",").split(","), *visitor_ids.strip(",").split(",")} - {""}, key=int)
    return f"{t}|{','.join(['', *ids, ''])}|{json.dumps(merged, separators=(',', ':'))}"


def _queue_replace(pipe: Pipeline, person: str, expected: str | None, new: str, ttl_ms: int, now: float) -> Reply:
    state, tombstones = person_keys(person)
    return pipe.script(REPLACE, [state, tombstones], [person, repr(now), expected or "", new, max(ttl_ms, 1)])


def _ttl(merge: Merge) -> int:
    """Milliseconds the merged state lives: the longer of the two people's."""
    return max(int(merge.visitor_ttl.value or 0), int(merge.user_ttl.value or 0), 1000)


def queue_merge(pipe: Pipeline, merge: Merge, now: float) -> Merge:
    """Queue, when the visitor has progress, the user's state replaced by the merge (if unchanged
    since read) and the visitor's deleted (if unchanged: a view landing between stays the visitor's)."""
    merged = merge_states(merge.user_state.value, merge.visitor_state.value)
    if merged is not None:
        merge.replaced = _queue_replace(pipe, merge.user, merge.user_state.value, merged, _ttl(merge), now)
        _queue_replace(pipe, merge.visitor, merge.visitor_state.value, "", 1, now)
    return merge


def merge_again(client: Client, merge: Merge, now: float) -> str:
    """Read the user's state again and merge the visitor's (as read the first time) into it: two
    round trips."""
    pipe = client.pipeline(transaction=False)
    again = queue_read(pipe, merge.visitor, merge.user)
    pipe.execute()
    merge.user_state, merge.user_ttl = again.user_state, again.user_ttl
    merged = merge_states(merge.user_state.value, merge.visitor_state.value)
    if merged is None:
        return "none"
    merge.replaced = _queue_replace(pipe, merge.user, merge.user_state.value, merged, _ttl(merge), now)
    pipe.execute()
    return merge.value
