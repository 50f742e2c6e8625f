"""The calendar's zone (``ACTIVITY_TIME_ZONE``) against the run's real Redis: every figure lands on
the local day of its event, cut at local midnight, on days of 23, 23.5, 24, 24.5 and 25 hours."""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core import checks
from django.test import override_settings
from django.urls import reverse

from activity import calendar
from activity.events import Event
from activity.models import DailyRollup
from activity.services import audience, ingest, privacy, recommendations, reports, sessions
from activity.store import keys
from activity.store.lifetimes import KEEP_DAYS
from tests.conftest import local_midnight
from tests.traces import dense_id

PANEL = reverse("admin:activity-dashboard-panel")


@dataclass(frozen=True)
class Case:
    zone: str
    day: date  # the local day D whose edges the events straddle
    hours: float  # D's length


CASES = [
    Case("America/New_York", date(2026, 3, 8), 23),  # 02:00 -> 03:00
    Case("America/New_York", date(2026, 11, 1), 25),  # 02:00 -> 01:00; D - 1 ends October
    Case("Europe/Berlin", date(2026, 3, 29), 23),
    Case("Europe/Berlin", date(2026, 10, 25), 25),
    Case("Australia/Lord_Howe", date(2026, 10, 4), 23.5),  # 02:00 -> 02:30
    Case("Australia/Lord_Howe", date(2026, 4, 5), 24.5),  # 02:00 -> 01:30
    Case("Asia/Kathmandu", date(2026, 11, 23), 24),  # +5:45, a Monday: D - 1 ends an ISO week
]


def week_of(day: date) -> tuple[int, int]:
    return day.isocalendar()[:2]


def month_of(day: date) -> tuple[int, int]:
    return day.year, day.month


@pytest.mark.django_db
@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case.zone}-{case.day}")
def test_each_figure_lands_on_the_local_day_of_its_event(case, at, redis_client, admin_client):
    start, end = local_midnight(case.zone, case.day), local_midnight(case.zone, case.day + timedelta(days=1))
    assert end - start == case.hours * 3600  # the case is the DST day it claims to be
    before, day, after = case.day - timedelta(days=1), case.day, case.day + timedelta(days=1)
    # (ts, user, path, the local day it must land on), in time order; user 105's two views are one
    # session over midnight, so its step /a -> /b counts on the later view's day.
    events = [
        (start - 0.5, "101", "/p1", before),
        (start + 0.5, "102", "/p2", day),
        (end - 10, "105", "/a", day),
        (end - 0.5, "103", "/p3", day),
        (end + 0.5, "104", "/p4", after),
        (end + 10, "105", "/b", after),
    ]
    with override_settings(ACTIVITY_TIME_ZONE=case.zone):
        seen: list[tuple[str, date]] = []
        for ts, user, path, expected in events:
            at(ts)
            ingest.record_events([Event(user=user, ts=ts, path=path)])
            seen.append((user, expected))
            stats = audience.stats()  # the API's and the dashboard's "today"
            assert stats.day == expected
            assert stats.active_day == len({u for u, d in seen if d == expected})
            assert stats.active_week == len({u for u, d in seen if week_of(d) == week_of(expected)})
            assert stats.active_month == len({u for u, d in seen if month_of(d) == month_of(expected)})

        first_day = {}
        for _, user, _, expected in events:
            first_day.setdefault(user, expected)
        at(end + 60)
        for current in (before, day, after):
            landed = [(user, path) for _, user, path, expected in events if expected == current]
            users = {user for user, _ in landed}
            bitmap = keys.active_bits(calendar.day_name(current))
            dense = {user: dense_id(redis_client, user) for user in first_day}
            assert {user for user in first_day if redis_client.getbit(bitmap, dense[user])} == users  # DAU
            assert sessions.page_views(current) == len(landed)
            assert sorted(sessions.top_paths(current)) == sorted(Counter(path for _, path in landed).items())
            row = audience.rollup_day(current)
            new = sum(1 for first in first_day.values() if first == current)
            assert (row.day, row.active_users, row.page_views, row.new_visitors) == (
                current,
                len(users),
                len(landed),
                new,
            )
            assert row.time_zone == case.zone
        assert sessions.started(day) == 3 and sessions.started(after) == 1  # 105's goes on from `day`
        assert recommendations.top_next(day, ["/a"]) == [[]]
        assert recommendations.top_next(after, ["/a"]) == [[("/b", 1)]]
        for user, first in first_day.items():
            found = privacy.export(user)
            assert found["first_visit"] == first.isoformat()
            assert sorted(found["active_days"]) == sorted({d.isoformat() for _, u, _, d in events if u == user})

        for ts, shown in ((end - 0.5, day), (end + 0.5, after)):  # the reports', the dashboard's "today"
            at(ts)
            viewers = {
                "day": {u for _, u, _, d in events if d == shown},
                "week": {u for _, u, _, d in events if week_of(d) == week_of(shown)},
            }
            for name, period in itertools.product(("most-active", "active-by-name"), viewers):
                assert {row["user"] for row in reports.page(name, period, 1, 10)[0].rows} == viewers[period]
            html = admin_client.get(PANEL).json()["html"]
            assert re.search(r'data-day="([0-9-]+)" data-time-zone="([^"]+)"', html).groups() == (
                shown.isoformat(),
                case.zone,
            )
            assert set(re.findall(r'class="bar live"[^>]*data-day="([0-9-]+)"', html)) == {shown.isoformat()}


def test_dated_keys_live_until_local_midnight_after_their_retention(at, redis_client):
    """A 25-hour day's keys, and its week's and month's, expire at the local midnight ending their
    period's last day plus ``KEEP_DAYS`` days, not at a multiple of 86,400 seconds from UTC midnight."""
    zone, day = "America/New_York", date(2026, 11, 1)  # a Sunday: its ISO week ends with it
    now = local_midnight(zone, day) + 3 * 3600
    with override_settings(ACTIVITY_TIME_ZONE=zone):
        at(now)
        ingest.record_events([Event(user="7", ts=now)])
        deadlines = {
            keys.active_bits("20261101"): local_midnight(zone, day + timedelta(days=1 + KEEP_DAYS)),
            keys.active_bits_week("2026W44"): local_midnight(zone, day + timedelta(days=1 + KEEP_DAYS)),
            keys.active_bits_month("202611"): local_midnight(zone, date(2026, 12, 1) + timedelta(days=KEEP_DAYS)),
        }
        for key, deadline in deadlines.items():
            assert deadline - now - 2 <= redis_client.ttl(key) <= deadline - now


def test_the_day_of_an_instant_is_its_local_date_however_the_lookups_come(at):
    """The hot path remembers the current day's edges: sequential and random instants, around every
    clock change of a few years, still get the zone's own answer."""
    rng = random.Random(37)
    first, last = datetime(2025, 1, 1, tzinfo=UTC).timestamp(), datetime(2028, 1, 1, tzinfo=UTC).timestamp()
    for case in CASES:
        zone = ZoneInfo(case.zone)
        with override_settings(ACTIVITY_TIME_ZONE=case.zone):
            edges = [local_midnight(case.zone, case.day) + shift for shift in (-1, -0.001, 0, 0.001, 1)]
            edges += [local_midnight(case.zone, case.day + timedelta(days=1)) + shift for shift in (-0.001, 0)]
            steps = [first + n * 1799.5 for n in range(int((last - first) / 1799.5))]
            for ts in [*edges, *steps, *(rng.uniform(first, last) for _ in range(2000))]:
                assert calendar.day_of(ts) == datetime.fromtimestamp(ts, zone).date()


@pytest.mark.django_db
def test_a_new_zone_applies_to_new_days_and_past_days_keep_their_keys(at, redis_client):
    """Changing the zone moves no key: a day written under UTC keeps its name and figures, later
    events are cut at the new zone's midnight, and each rollup row says which zone cut it."""
    utc_noon = datetime(2026, 11, 23, 12, tzinfo=UTC).timestamp()
    at(utc_noon)
    ingest.record_events([Event(user="1", ts=utc_noon, path="/x")])
    assert audience.rollup_day(date(2026, 11, 23)).time_zone == "UTC"
    with override_settings(ACTIVITY_TIME_ZONE="Asia/Kathmandu"):
        late = datetime(2026, 11, 23, 20, tzinfo=UTC).timestamp()  # 01:45 on the 24th in Kathmandu
        at(late)
        ingest.record_events([Event(user="2", ts=late, path="/y")])
        assert audience.stats().day == date(2026, 11, 24)
        assert redis_client.getbit(keys.active_bits("20261123"), dense_id(redis_client, "1")) == 1
        assert redis_client.getbit(keys.active_bits("20261124"), dense_id(redis_client, "2")) == 1
        assert sessions.page_views(date(2026, 11, 23)) == 1
        assert sessions.page_views(date(2026, 11, 24)) == 1
        row = audience.rollup_day(date(2026, 11, 24))  # the day in progress
        assert (row.active_users, row.time_zone) == (1, "Asia/Kathmandu")
    assert DailyRollup.objects.get(day=date(2026, 11, 23)).time_zone == "UTC"


def test_the_zone_follows_djangos_time_zone_unless_set():
    assert calendar.zone_name() == "UTC"
    with override_settings(TIME_ZONE="Australia/Lord_Howe"):
        assert calendar.zone_name() == "Australia/Lord_Howe"
        assert calendar.day_of(local_midnight("Australia/Lord_Howe", date(2026, 4, 5))) == date(2026, 4, 5)
        with override_settings(ACTIVITY_TIME_ZONE="Asia/Kathmandu"):
            assert calendar.zone_name() == "Asia/Kathmandu"
    assert calendar.zone_name() == "UTC"
    assert calendar.day_of(local_midnight("Australia/Lord_Howe", date(2026, 4, 5))) == date(2026, 4, 4)


@pytest.mark.parametrize("name", ["Mars/Olympus_Mons", "../etc/passwd", "UTC+2", 42])
def test_a_zone_that_is_not_one_is_a_check_error_naming_it(name):
    with override_settings(ACTIVITY_TIME_ZONE=name):
        found = [message for message in checks.run_checks(tags=["activity"]) if message.id == "activity.E006"]
    assert len(found) == 1
    assert found[0].msg.startswith(f"ACTIVITY_TIME_ZONE = {name!r}:")
    assert calendar.zone_name() == "UTC"
