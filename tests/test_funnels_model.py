"""Funnel counts against a brute-force replay of their definition (windowFunnel's, per entry): random
page-view histories, arriving in random order and batches, in both modes, in a zone whose midnights
are not UTC's, across a day's, a week's and a month's edge. The rule the docs give for late views
(a view older than the latest one taken for that person is left out) is applied first;
then, for every entry, how far it goes. A second funnel beside the one drawn shares each person's
state, and is checked too."""

from __future__ import annotations

import itertools
from collections import defaultdict
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings
from hypothesis import HealthCheck, given, seed
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from activity.events import Event
from activity.funnel_rules import step_matches
from activity.models import Funnel
from activity.services import funnels, ingest

pytestmark = pytest.mark.django_db

ZONE = "America/St_Johns"  # UTC-3:30 (-2:30 in summer): its midnights fall at no whole UTC hour
EDGE = date(2026, 12, 1)  # a Tuesday that starts a month; the ISO week starts the day before
PATHS = ["/a", "/b", "/c", "/a/x", "/z"]  # /z matches no step
STEPS = ["/a", "/b", "/c", "/a*"]
OTHER_STEPS = ["/c", "/a*", "/b"]
WINDOWS = [60, 600, 3600, 86400]
_people = itertools.count()


def midnight(day: date) -> float:
    return datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(ZONE)).timestamp()


def periods_of(ts: float) -> list[tuple[str, date]]:
    day = datetime.fromtimestamp(ts, ZoneInfo(ZONE)).date()
    return [("day", day), ("week", day - timedelta(days=day.weekday())), ("month", day.replace(day=1))]


def seen_views(views: list[tuple[float, str]], firsts: list[str], created: float) -> list[tuple[float, str]]:
    """The person's views the funnels see, as docs/funnels.md states it: in arrival order, from the
    first that enters one of them (its path matches one of ``firsts``) on, each not older than the
    latest one seen."""
    seen: list[tuple[float, str]] = []
    for ts, path in views:
        if (seen and ts >= seen[-1][0]) or (
            not seen and ts >= created and any(step_matches(first, path) for first in firsts)
        ):
            seen.append((ts, path))
    return seen


def taken_views(seen: list[tuple[float, str]], steps: list[str]) -> list:
    """Of the views seen, those from the funnel's own first entry on, with the steps each matches."""
    taken: list[tuple[float, set[int]]] = []
    for ts, path in seen:
        matched = {n for n, step in enumerate(steps, 1) if step_matches(step, path)}
        if taken or 1 in matched:
            taken.append((ts, matched))
    return taken


def reached(taken: list, entry: int, steps: int, window: int, strict: bool) -> int:
    """The step the entry at ``taken[entry]`` reaches: each later step matched in order (strict: by
    the very next view), within ``window`` seconds of the entry."""
    start, level, at = taken[entry][0], 1, entry + 1
    while level < steps:
        if strict:
            found = at if at < len(taken) and level + 1 in taken[at][1] else None
        else:
            found = next((i for i in range(at, len(taken)) if level + 1 in taken[i][1]), None)
        if found is None or taken[found][0] > start + window:
            return level
        level, at = level + 1, found + 1
    return level


def replay(history: dict[str, list[tuple[float, str]]], defined: list[Funnel], created: float) -> dict:
    """Per funnel id, per (period, start), the people at each step."""
    firsts = [funnel.steps[0] for funnel in defined]
    found = {}
    for funnel in defined:
        best: dict[tuple[str, date], dict[str, int]] = defaultdict(dict)
        strict = funnel.mode == "strict"
        for person, views in history.items():
            taken = taken_views(seen_views(views, firsts, created), funnel.steps)
            for entry, (ts, matched) in enumerate(taken):
                if 1 in matched:
                    level = reached(taken, entry, len(funnel.steps), funnel.window, strict)
                    for period in periods_of(ts):
                        best[period][person] = max(best[period].get(person, 0), level)
        found[funnel.pk] = {
            period: [sum(1 for level in levels.values() if level >= k) for k in range(1, len(funnel.steps) + 1)]
            for period, levels in best.items()
        }
    return found


GAPS = [0, 1, 30, 59, 60, 61, 599, 600, 601, 3599, 3600, 3601, 86399, 86400, 86401, 5 * 3600]
# Each view: a person, seconds after that person's previous view (the windows' edges among them,
# short gaps as often as the rest), a path, and whether it arrives late (one in six: its time
# before that previous view's).
gaps = st.one_of(st.sampled_from(GAPS[:6]), st.sampled_from(GAPS))
views = st.tuples(st.integers(0, 2), gaps, st.sampled_from(PATHS), st.sampled_from([False] * 5 + [True]))
histories = st.lists(views, min_size=8, max_size=60)
STARTS = [-3 * 3600, -3600, -61, -1, 0, 86400 - 600]  # seconds from the week's edge (the month's a day on)


@seed(20261129)
@hypothesis_settings(
    max_examples=400, database=None, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    history=histories,
    steps=st.lists(st.sampled_from(STEPS), min_size=2, max_size=3),
    window=st.sampled_from(WINDOWS),
    mode=st.sampled_from(["sequential", "strict"]),
    start=st.integers(0, len(STARTS) - 1),
    cuts=st.lists(st.integers(0, 60), max_size=4),
)
def test_counts_match_a_replay_of_the_definition(at, history, steps, window, mode, start, cuts):
    edge = midnight(EDGE - timedelta(days=1))
    at(edge + 5 * 86400)
    created = edge - 3 * 3600 + 1800
    Funnel.objects.all().delete()
    # The funnel drawn, and one beside it whose progress shares each person's state.
    Funnel.objects.create(name="model", steps=steps, window=window, mode=mode)
    Funnel.objects.create(name="beside", steps=OTHER_STEPS, window=600, mode="strict")
    Funnel.objects.update(created=datetime.fromtimestamp(created, ZoneInfo("UTC")))
    defined = list(Funnel.objects.all())
    funnels.forget()
    names = {n: f"m{next(_people)}" for n in range(4)}
    latest = {n: edge + STARTS[(start + n) % len(STARTS)] for n in range(4)}
    arrivals: list[Event] = []
    for person, gap, path, late in history:
        ts = latest[person] - gap if late else latest[person] + gap
        latest[person] = max(latest[person], ts)
        arrivals.append(Event(user=names[person], ts=ts, path=path))
    expected_history: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for event in arrivals:
        expected_history[funnels.user_person(event.user)].append((event.ts, event.path))
    with override_settings(ACTIVITY_TIME_ZONE=ZONE):
        for start, end in itertools.pairwise([0, *sorted(cuts), len(arrivals)]):
            if arrivals[start:end]:
                ingest.record_events(arrivals[start:end])
        expected = replay(expected_history, defined, created)
        for funnel in defined:
            for period, day in {p for ts, _ in itertools.chain(*expected_history.values()) for p in periods_of(ts)}:
                counted = [step["people"] for step in funnels.report(funnel, period, day)["steps"]]
                assert counted == expected[funnel.pk].get((period, day), [0] * len(funnel.steps)), (funnel, period, day)
