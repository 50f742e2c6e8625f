"""Funnels (docs/funnels.md): staff define them (``Funnel`` rows), page views advance each person's
progress as they are recorded (``services.ingest``: the batch's round trip reads its people's
states, ``advance`` moves them on and writes them back in one more), and a
report reads each step's people live from Redis, or from the rollup's rows once a period is final.
Each process reads the definitions at most every ``REFRESH_S`` seconds: with none defined, page
views cost nothing more."""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError, transaction

from activity import calendar, clock
from activity.calendar import DAY_SECONDS
from activity.funnel_rules import MAX_FUNNELS, step_matches
from activity.models import Funnel, FunnelCount
from activity.store import funnel_progress
from activity.store import funnels as store
from activity.store.client import get_client
from activity.store.lifetimes import KEEP_DAYS
from activity.store.scripts import Pipeline

logger = logging.getLogger("activity.services.funnels")

REFRESH_S = 5.0  # seconds a process keeps the definitions it read before reading them again
COMMIT_TRIES = 5  # writes of a person's state a batch tries while other processes write it too
# The rollup writes the periods that became final in these last days: its counts keys live
# KEEP_DAYS past their month and window, a week's first days in the month before.
CATCH_UP_DAYS = KEEP_DAYS - 7


@dataclass(frozen=True, slots=True)
class Definition:
    """A funnel as the write path and the reports use it."""

    store: funnel_progress.Funnel
    steps: tuple[str, ...]
    created: float  # epoch seconds: views before it are not counted

    @classmethod
    def of(cls, row: Funnel) -> Definition:
        steps = tuple(row.steps)
        return cls(
            store=funnel_progress.Funnel(id=row.pk, strict=row.mode == "strict", window=row.window, steps=len(steps)),
            steps=steps,
            created=row.created.timestamp(),
        )


@dataclass
class Matcher:
    """Which funnels' steps a path matches: exact steps by dictionary, prefixes one by one."""

    definitions: tuple[Definition, ...] = ()
    exact: dict[str, list[tuple[Definition, int]]] = field(default_factory=dict)
    prefixes: list[tuple[str, Definition, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for definition in self.definitions:
            for number, step in enumerate(definition.steps, 1):
                if step.endswith("*"):
                    self.prefixes.append((step, definition, number))
                else:
                    self.exact.setdefault(step, []).append((definition, number))

    def view(self, ts: float, path: str) -> funnel_progress.View:
        """The view with the steps its path matches (those of funnels created after ``ts`` left out)."""
        found = [*self.exact.get(path, ()), *((d, n) for step, d, n in self.prefixes if step_matches(step, path))]
        matches = tuple((definition.store.id, number) for definition, number in found if definition.created <= ts)
        return funnel_progress.View(ts=ts, matches=matches)


def read_definitions() -> list[Funnel]:
    """What the write path counts by (the suite gives its tests without a database no funnel)."""
    return defined()


class _Cache:
    """The definitions this process read last, and when it read them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._matcher = Matcher()
        self._until = 0.0

    def matcher(self) -> Matcher:
        with self._lock:
            if clock.now() < self._until:
                return self._matcher
        try:
            rows = read_definitions()
        except DatabaseError as error:  # counting goes on with the definitions read last
            logger.warning("funnel definitions not read, the last ones kept: %s", error)
            rows = None
        with self._lock:
            if rows is not None:
                self._matcher = Matcher(tuple(Definition.of(row) for row in rows))
            self._until = clock.now() + REFRESH_S
            return self._matcher

    def forget(self) -> None:
        """Read the definitions again at the next use: this process changed them."""
        with self._lock:
            self._until = 0.0


_cache = _Cache()


def forget(**kwargs: Any) -> None:
    """``post_save`` / ``post_delete`` of ``Funnel``: this process sees the change at once."""
    _cache.forget()


@dataclass(frozen=True, slots=True)
class Pending:
    """A batch's page views for the funnels, per person in arrival order with their periods, and
    their people's states once the batch's round trip has read them."""

    funnels: dict[int, funnel_progress.Funnel]
    views: dict[str, list[tuple[funnel_progress.View, funnel_progress.Periods]]]
    states: store.States


def queue_views(pipe: Pipeline, views: Sequence[tuple[str, float, str]], now: float) -> Pending | None:
    """Queue reading the states of the people of ``views`` (person, ts, path), in arrival order: every
    page view of people, since a view that matches no step still ends a strict funnel's chain and is
    the latest view of its person; ``advance`` does the rest once the pipeline has run. None when
    there is no page view or no funnel defined (then nothing is queued, and a batch of other events
    never reads the definitions)."""
    if not views:
        return None
    matcher = _cache.matcher()
    if not matcher.definitions:
        return None
    by_person: dict[str, list[tuple[funnel_progress.View, funnel_progress.Periods]]] = {}
    for person, ts, path in views:
        by_person.setdefault(person, []).append((matcher.view(ts, path), _periods(calendar.day_of(ts))))
    defined = {definition.store.id: definition.store for definition in matcher.definitions}
    return Pending(funnels=defined, views=by_person, states=store.queue_states(pipe, list(by_person), now))


@functools.lru_cache(maxsize=64)
def _periods(day: date) -> funnel_progress.Periods:
    day_name, week, month = (store.period_key(period, day) for period in calendar.PERIODS)
    return day_name, week, month


def advance(pending: Pending | None, now: float) -> None:
    """Move the people of ``pending`` on with their views and write their states back, each only if
    no other process wrote it since it was read; those that one did are read and moved on again (at
    most ``COMMIT_TRIES`` times: past them, the batch's views of that person are left out of the
    funnels, and logged). One round trip, and two more per retry."""
    if pending is None:
        return
    client = get_client()
    states = pending.states.value
    for _ in range(COMMIT_TRIES):
        changes = []
        for person, state in states.items():
            advanced = funnel_progress.advance(state, pending.views[person], pending.funnels)
            if advanced is not None:
                changes.append(store.Change(person=person, read=state, advanced=advanced))
        if not changes:
            return
        again = store.commit(client, changes, now)
        if not again:
            return
        states = store.read_states(client, again, now)
    logger.warning(
        "funnels: %d people's views left out, their states written by others %d times", len(states), COMMIT_TRIES
    )


def upgrade(step: int = 1000) -> int:
    """Move the progress a release before the generations kept, a string per person, into the
    generations, ``step`` keys a step; returns how many moved. Safe to interrupt and to run again."""
    return sum(store.fold_former_states(get_client(), step, clock.now()))


def user_person(user: str) -> str:
    return f"u:{user}"


def visitor_person(visitor: str) -> str:
    return store.visitor_person(visitor)


# --- definitions --------------------------------------------------------------------------------


def defined() -> list[Funnel]:
    return list(Funnel.objects.all())


def get(funnel_id: int) -> Funnel | None:
    return Funnel.objects.filter(pk=funnel_id).first()


def check_room() -> None:
    """``ValidationError`` when one more funnel would pass ``MAX_FUNNELS``."""
    if Funnel.objects.count() >= MAX_FUNNELS:
        raise ValidationError(f"At most {MAX_FUNNELS} funnels can be defined; delete one first.")


def delete(funnel: Funnel) -> None:
    """Delete the funnel and its rolled-up counts. What Redis holds of it is read no more and goes
    with its keys' TTLs (the month's counts, its people's progress); ids are never reused."""
    funnel.delete()


# --- reports ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    step: int
    path: str
    people: int
    conversion: float  # of step 1's people
    from_previous: float  # of the previous step's people
    dropped: int  # the previous step's people who did not reach this one


def final_after(definition: Definition, period: str, start: date) -> float:
    """When the period's counts can no longer change: its end, plus the window of its last entries."""
    last = start if period == "day" else calendar.last_day(period, start)
    return calendar.midnight(last + timedelta(days=1)).timestamp() + definition.store.window


def counts(definition: Definition, period: str, start: date) -> list[int]:
    """People at each step in the period starting ``start``: the rollup's rows once it wrote them
    (the period is final), else Redis's live counts."""
    rows = dict(
        FunnelCount.objects.filter(funnel_id=definition.store.id, period=period, start=start).values_list(
            "step", "people"
        )
    )
    if rows:
        return [rows.get(step, 0) for step in range(1, definition.store.steps + 1)]
    return store.counts(get_client(), definition.store, period, start)


def steps(definition: Definition, people: Sequence[int]) -> list[Step]:
    """Each step with its conversion from step 1 and from the previous step (1.0 when nobody
    entered: nobody was lost)."""
    found: list[Step] = []
    for number, (path, count) in enumerate(zip(definition.steps, people, strict=True), 1):
        first, previous = people[0], people[number - 2] if number > 1 else count
        found.append(
            Step(
                step=number,
                path=path,
                people=count,
                conversion=round(count / first, 4) if first else 1.0,
                from_previous=round(count / previous, 4) if previous else 1.0,
                dropped=previous - count,
            )
        )
    return found


def report(funnel: Funnel, period: str, day: date) -> dict[str, Any]:
    """The funnel's steps in the ``period`` holding ``day``, as ``GET /api/v1/funnels/<id>/`` answers."""
    definition = Definition.of(funnel)
    start = calendar.start_of(period, day)
    return {
        "funnel": funnel.pk,
        "name": funnel.name,
        "mode": funnel.mode,
        "window": funnel.window,
        "period": period,
        "start": start.isoformat(),
        "steps": [asdict(step) for step in steps(definition, counts(definition, period, start))],
    }


# --- the rollup ---------------------------------------------------------------------------------


def periods_to_keep(definition: Definition, now: float) -> list[tuple[str, date]]:
    """(period, start) of the funnel that became final in the last ``CATCH_UP_DAYS`` (so Redis
    still holds their counts) and began after its creation began: a missed rollup is made up by
    the next."""
    today = calendar.day_of(now)
    created = calendar.day_of(definition.created)
    back = CATCH_UP_DAYS + math.ceil(definition.store.window / DAY_SECONDS) + 31
    found: dict[tuple[str, date], None] = {}
    for offset in range(back, -1, -1):
        day = today - timedelta(days=offset)
        if day < created:
            continue
        for period in calendar.PERIODS:
            start = calendar.start_of(period, day)
            if now - CATCH_UP_DAYS * DAY_SECONDS < final_after(definition, period, start) <= now:
                found[(period, start)] = None
    return list(found)


def keep_counts(now: float) -> int:
    """Write the ``FunnelCount`` rows of every funnel's periods that became final and are not
    written yet; returns how many rows. Run by the daily rollup (behind its lock)."""
    rows: list[FunnelCount] = []
    zone = calendar.zone_name()
    for funnel in Funnel.objects.all():
        definition = Definition.of(funnel)
        written = set(FunnelCount.objects.filter(funnel=funnel).values_list("period", "start").distinct())
        for period, start in periods_to_keep(definition, now):
            if (period, start) in written:
                continue
            people = store.counts(get_client(), definition.store, period, start)
            rows += [
                FunnelCount(funnel=funnel, period=period, start=start, step=step, people=count, time_zone=zone)
                for step, count in enumerate(people, 1)
            ]
    with transaction.atomic():
        FunnelCount.objects.bulk_create(
            rows,
            batch_size=500,
            update_conflicts=True,
            unique_fields=["funnel", "period", "start", "step"],
            update_fields=["people", "time_zone"],
        )
    return len(rows)
