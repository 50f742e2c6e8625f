"""Funnel progress and counts (docs/funnels.md): each person's progress in every funnel is one string
(``store.funnel_progress``) in their partition's hash of the generation of its latest write
(``lifetimes.FUNNEL_STATES``), read with a batch's round trip, advanced in Python and written back
if unchanged (``lua/funnel_commit.lua``), and reaching a step adds the person to the counts of the
entry's day, week and month. People are spread over ``PARTITIONS`` hash tags, so a Cluster spreads
the calls; a read sums the partitions in one round trip."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from activity import calendar
from activity.calendar import DAY_SECONDS
from activity.funnel_rules import MAX_WINDOW
from activity.store import funnel_progress, keys, partitioning
from activity.store.client import PER_CALL, Client, Reply, chunks, scan_steps
from activity.store.funnel_progress import Advanced, Funnel
from activity.store.lifetimes import FUNNEL_STATES, KEEP_DAYS
from activity.store.scripts import LuaScript, Pipeline

COMMIT = LuaScript("funnel_commit")

PARTITIONS = 16  # hash tags {fn:0}..{fn:15}; changing it re-homes every person, so it is fixed


def visitor_person(visitor: str) -> str:
    """A visitor as funnels name people (a user is ``u:<user>``)."""
    return f"v:{visitor}"


def partition_of(person: str) -> int:
    """The person's partition (``partitioning.partition_of``)."""
    return partitioning.partition_of(person, PARTITIONS)


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


def _generations(partition: int, now: float) -> list[str]:
    """The partition's states hashes alive at ``now``, the current generation's first."""
    return [keys.funnel_states(partition, generation) for generation in FUNNEL_STATES.live(calendar.day_of(now))]


def _current_ttl(now: float) -> int:
    """Seconds the current generation's states hash lives at ``now``, given at each write."""
    return max(FUNNEL_STATES.ttl(FUNNEL_STATES.of(calendar.day_of(now)), now), 1)


class States:
    """The states of people as a round trip read them (``queue_states``): person -> state, None for
    none. A person's state is the one in the newest generation holding them."""

    def __init__(self, pipe: Pipeline, people: Sequence[str], now: float) -> None:
        self._read: list[tuple[list[str], list[Reply]]] = []
        for partition, own in partitioning.spread(people, PARTITIONS).items():
            generations = _generations(partition, now)
            for group in chunks(own, PER_CALL):
                replies = []
                for generation in generations:
                    pipe.hmget(generation, group)
                    replies.append(pipe.reply())
                self._read.append((group, replies))

    @property
    def value(self) -> dict[str, str | None]:
        return {
            person: next((reply.value[n] for reply in replies if reply.value[n] is not None), None)
            for group, replies in self._read
            for n, person in enumerate(group)
        }


def queue_states(pipe: Pipeline, people: Sequence[str], now: float) -> States:
    """Queue reading ``people``'s states: one HMGET per partition (and ``PER_CALL`` people) and live
    generation."""
    return States(pipe, people, now)


def read_states(client: Client, people: Sequence[str], now: float) -> dict[str, str | None]:
    """``people``'s states now: one round trip."""
    pipe = client.pipeline(transaction=False)
    states = queue_states(pipe, people, now)
    pipe.execute()
    return states.value


@dataclass(frozen=True, slots=True)
class Change:
    """A person's state as read, and as a batch's views advanced it."""

    person: str
    read: str | None
    advanced: Advanced


def commit(client: Client, changes: Sequence[Change], now: float) -> list[str]:
    """Write the ``changes`` back, each only if the person's state is still the one read, with the
    counts it adds: one script call per partition (and ``PER_CALL`` people), one round trip. Returns
    the people whose state changed since it was read (nothing of theirs written)."""
    by_partition: dict[int, list[Change]] = defaultdict(list)
    for change in changes:
        by_partition[partition_of(change.person)].append(change)
    pipe = client.pipeline(transaction=False)
    calls: list[tuple[list[Change], Reply]] = []
    ttl = _current_ttl(now)
    for partition, own in by_partition.items():
        generations = _generations(partition, now)
        for group in chunks(own, PER_CALL):
            months = sorted({month for change in group for month, _ in change.advanced.added})
            number = {month: n for n, month in enumerate(months, 1)}
            args: list[str | int] = [repr(now), ttl, len(months)]
            args += [counts_ttl(calendar.parse_period("month", month.removeprefix("m:")), now) for month in months]
            for change in group:
                added = " ".join(f"{number[month]} {field}" for month, field in change.advanced.added)
                args += [change.person, change.read or "", change.advanced.state, added]
            script_keys = [keys.tombstones(f"fn:{partition}"), *generations]
            script_keys += [keys.funnel_counts(partition, month.removeprefix("m:")) for month in months]
            calls.append((group, pipe.script(COMMIT, script_keys, args)))
    pipe.execute()
    return [group[n - 1].person for group, reply in calls for n in reply.value]


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


@dataclass(frozen=True, slots=True)
class Home:
    """Where a person's progress may be at a time: what an erase clears and an export reads."""

    person: str
    generations: list[str]  # the partition's live states hashes, the current first
    former: str  # the string a release before the generations kept it in, until the upgrade moves it
    tombstones: str  # the partition's tombstones

    def removals(self) -> list[tuple[str, ...]]:
        """The commands that remove the person's progress, wherever it is."""
        return [*(("HDEL", generation, self.person) for generation in self.generations), ("DEL", self.former)]


def person_home(person: str, now: float) -> Home:
    """Where ``person``'s progress may be at ``now``."""
    partition = partition_of(person)
    former, tombstones = keys.former_funnel_state(partition, person), keys.tombstones(f"fn:{partition}")
    return Home(person, _generations(partition, now), former, tombstones)


# --- a sign-in: the visitor's progress continues as the user's (docs/funnels.md#signing-in) -----

REPLACE = LuaScript("funnel_replace")


@dataclass(slots=True)
class Merge:
    """The two people's states as read (``queue_read``), then what the merge did."""

    visitor: str  # "v:<visitor>"
    user: str  # "u:<user>"
    visitor_read: States
    user_read: States
    replaced: Reply | None = None

    def states(self) -> tuple[str | None, str | None]:
        """(the user's state, the visitor's), as last read."""
        return self.user_read.value[self.user], self.visitor_read.value[self.visitor]

    @property
    def value(self) -> str:
        """``none`` (the visitor had no progress), ``merged``, ``retry`` (the user's state changed
        since it was read) or ``erased`` (the user is tombstoned)."""
        if self.replaced is None:
            return "none"
        return {1: "merged", 0: "retry"}.get(self.replaced.value, "erased")


def queue_read(pipe: Pipeline, visitor: str, user: str, now: float) -> Merge:
    """Queue the reads of both people's states (two tags: plain commands, no script)."""
    return Merge(visitor, user, queue_states(pipe, [visitor], now), queue_states(pipe, [user], now))


def _queue_replace(pipe: Pipeline, person: str, expected: str | None, new: str, now: float) -> Reply:
    home = person_home(person, now)
    args = [person, repr(now), expected or "", new, _current_ttl(now)]
    return pipe.script(REPLACE, [home.tombstones, *home.generations], args)


def queue_merge(pipe: Pipeline, merge: Merge, now: float) -> Merge:
    """Queue, when the visitor has progress, the user's state replaced by the merge (if unchanged
    since read) and the visitor's deleted (if unchanged: a view landing between stays the visitor's)."""
    user_state, visitor_state = merge.states()
    merged = funnel_progress.merge(user_state, visitor_state)
    if merged is not None:
        merge.replaced = _queue_replace(pipe, merge.user, user_state, merged, now)
        _queue_replace(pipe, merge.visitor, visitor_state, "", now)
    return merge


def merge_again(client: Client, merge: Merge, now: float) -> str:
    """Read the user's state again and merge the visitor's (as read the first time) into it: two
    round trips."""
    pipe = client.pipeline(transaction=False)
    merge.user_read = queue_states(pipe, [merge.user], now)
    pipe.execute()
    user_state, visitor_state = merge.states()
    merged = funnel_progress.merge(user_state, visitor_state)
    if merged is None:
        return "none"
    merge.replaced = _queue_replace(pipe, merge.user, user_state, merged, now)
    pipe.execute()
    return merge.value


# --- ``manage.py activity_upgrade``: a release before the generations' states -------------------

STATE_FOLD = LuaScript("funnel_state_fold")


def fold_former_states(client: Client, step: int, now: float) -> Iterator[int]:
    """Move the states a release before the generations kept, a string per person, into their
    partitions' current generations, ``step`` keys a SCAN step; yields how many each step moved.
    Safe to interrupt and to run again: a moved string is gone."""
    ttl = _current_ttl(now)
    for found in scan_steps(client, keys.former_funnel_state_pattern(), step):
        pipe = client.pipeline(transaction=False)
        calls = []
        for key in found:
            partition, person = keys.former_funnel_state_parts(key)
            calls.append(pipe.script(STATE_FOLD, [key, *_generations(partition, now)], [person, ttl]))
        if calls:
            pipe.execute()
            yield sum(call.value for call in calls)
