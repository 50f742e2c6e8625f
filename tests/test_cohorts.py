"""Retention cohorts (docs/cohorts.md) against the run's real Redis and database: every cell of
random multi-day histories checked against a brute-force set computation, in a zone with a DST
change, with late and out-of-order events; the bounds, the permission, one build per expiry, and
the rollup's cells standing in for bitmaps that expired."""

from __future__ import annotations

import threading
import time
from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import override_settings
from hypothesis import HealthCheck, given, seed
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from activity import calendar, clock
from activity.events import Event
from activity.models import RetentionCell
from activity.services import audience, backfill, cohorts, ingest, reports
from activity.store import keys, lifetimes
from tests.clients import APIClient
from tests.conftest import delete_own_keys, local_midnight, with_permissions
from tests.traces import dense_id

URL = "/api/v1/retention/"

REPEATABLE = hypothesis_settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=30,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def local(zone: str, day: date, seconds: float = 0) -> float:
    """Epoch seconds ``seconds`` after the local midnight of ``day`` in ``zone`` (wall-clock midnight:
    on a DST day the local day is 23 or 25 hours long, so only seconds under 23 h stay in it)."""
    return local_midnight(zone, day) + seconds


# --- the model ---------------------------------------------------------------------------------

ZONES = ["America/New_York", "Asia/Kathmandu", "Australia/Lord_Howe"]
FIRST = date(2026, 10, 19)  # a Monday; three weeks span New York's and Lord Howe's DST changes
DAYS = 21


def week_of(day: date) -> date:
    return day - timedelta(days=day.weekday())


def expected_table(
    period: str,
    starts: list[date],
    periods: int,
    today: date,
    cohort_of: dict[int, date],
    active: dict[int, set[date]],
    members: set[int] | None,
) -> list[dict[str, Any]]:
    """The table by brute force: sets of users, nothing of the service's."""
    start_of = (lambda d: d) if period == "day" else week_of
    step = timedelta(days=1 if period == "day" else 7)
    rows = []
    for start in starts:
        cohort = {u for u, first in cohort_of.items() if start_of(first) == start}
        if members is not None:
            cohort &= members
        retained = []
        k = 0
        while k < periods and start + k * step <= start_of(today):
            target = start + k * step
            retained.append(len({u for u in cohort if any(start_of(d) == target for d in active[u])}))
            k += 1
        rows.append({"start": start.isoformat(), "size": len(cohort), "retained": retained})
    return rows


history = st.fixed_dictionaries(
    {
        "zone": st.sampled_from(ZONES),
        "users": st.lists(
            st.fixed_dictionaries(
                {
                    "signup": st.integers(-3, DAYS - 1),
                    "days": st.sets(st.integers(0, DAYS - 1), max_size=6),
                    "member": st.booleans(),
                }
            ),
            min_size=1,
            max_size=10,
        ),
        # Per event: seconds into its local day (under 23 h), and a delivery delay: most on time,
        # some hours late (past midnight), some days late (after the user's later days).
        "timing": st.lists(
            st.tuples(st.integers(0, 82_000), st.sampled_from([0, 0, 0, 5, 3_600 * 20, 86_400 * 2, 86_400 * 4])),
            min_size=60,
            max_size=60,
        ),
    }
)


@pytest.mark.django_db
@seed(37)
@REPEATABLE
@given(history)
def test_every_cell_and_every_active_count_match_the_model(
    redis_client, at, django_capture_on_commit_callbacks, example
):
    zone = example["zone"]
    User = get_user_model()
    with override_settings(ACTIVITY_TIME_ZONE=zone):
        delete_own_keys(redis_client)
        group = Group.objects.create(name="cohort-model")
        users: list[Any] = []
        try:
            for n, spec in enumerate(example["users"]):
                joined = datetime.fromtimestamp(
                    local(zone, FIRST + timedelta(days=spec["signup"]), 3_600), ZoneInfo(zone)
                )
                users.append(User.objects.create(username=f"model-{n}", date_joined=joined))
                if spec["member"]:
                    with django_capture_on_commit_callbacks(execute=True):  # the membership bitmap
                        users[-1].groups.add(group)
            # The history, delivered in order of arrival: some events late, so a user's later day
            # can arrive before an earlier one.
            deliveries = []
            timing = iter(example["timing"])
            for user, spec in zip(users, example["users"], strict=True):
                for day in spec["days"]:
                    into, delay = next(timing)
                    ts = local(zone, FIRST + timedelta(days=day), into)
                    deliveries.append((ts + delay, ts, str(user.pk)))
            deliveries.sort()
            end = local(zone, FIRST + timedelta(days=DAYS - 1), 82_500)  # after every event
            for arrival, ts, user in deliveries:
                at(min(max(arrival, ts), end))
                ingest.record_events([Event(user, ts)])
            at(end)
            today = calendar.day_of(end)

            specs = list(zip(users, example["users"], strict=True))
            active = {u.pk: {FIRST + timedelta(days=d) for d in spec["days"]} for u, spec in specs}
            first = {pk: min(days) for pk, days in active.items() if days}
            joined = {u.pk: FIRST + timedelta(days=spec["signup"]) for u, spec in specs}
            members = {u.pk for u, spec in specs if spec["member"]}

            for period, count in (("day", DAYS), ("week", 3)):
                current = today if period == "day" else week_of(today)
                step = timedelta(days=1 if period == "day" else 7)
                starts = [current - (count - 1 - n) * step for n in range(count)]
                for by, cohort_of in (("first_seen", first), ("signup", joined)):
                    for group_id, restricted in ((None, None), (group.pk, members)):
                        query = cohorts.Query(by=by, period=period, cohorts=count, periods=count, group=group_id)
                        found = cohorts.build(query, end)
                        want = expected_table(period, starts, count, today, cohort_of, active, restricted)
                        assert found["cohorts"] == want, (by, period, group_id)
                        assert found["time_zone"] == zone

            # DAU, WAU and MAU of every day, as the stats read them on that day.
            for n in range(DAYS):
                day = FIRST + timedelta(days=n)
                at(local(zone, day, 12 * 3_600))
                stats = audience.stats()
                assert stats.active_day == sum(day in days for days in active.values())
                assert stats.active_week == sum(
                    any(week_of(d) == week_of(day) for d in days) for days in active.values()
                )
                assert stats.active_month == sum(any(d.month == day.month for d in days) for days in active.values())
        finally:
            User.objects.filter(pk__in=[u.pk for u in users]).delete()
            group.delete()


# --- the write path ----------------------------------------------------------------------------


def test_a_late_event_moves_the_user_to_the_earlier_cohort(redis_client, at):
    now = clock.now()
    today = calendar.day_of(now)
    at(now)
    ingest.record_events([Event("7", now)])  # today first
    ingest.record_events([Event("7", now - 3 * 86_400)])  # then three days ago, late
    found = cohorts.build(cohorts.Query(cohorts=5, periods=5), now)
    by_start = {row["start"]: row for row in found["cohorts"]}
    assert by_start[(today - timedelta(days=3)).isoformat()]["size"] == 1
    assert by_start[(today - timedelta(days=3)).isoformat()]["retained"] == [1, 0, 0, 1]
    assert by_start[today.isoformat()]["size"] == 0
    assert (
        redis_client.getbit(keys.first_active(calendar.day_name(today)), dense_id(redis_client, "7")) == 1
    )  # excluded at read


@pytest.mark.django_db
def test_backfill_seeds_first_days_from_last_login_and_activity_rows(redis_client, at):
    now = clock.now()
    at(now)
    today = calendar.day_of(now)
    user = get_user_model().objects.create(
        username="old", last_login=datetime.fromtimestamp(now - 10 * 86_400).astimezone()
    )
    ingest.record_events([Event(str(user.pk), now)])  # tracked today, before any backfill
    backfill.backfill()
    found = cohorts.build(cohorts.Query(cohorts=11, periods=11), now)
    sizes = {row["start"]: row["size"] for row in found["cohorts"]}
    assert sizes[(today - timedelta(days=10)).isoformat()] == 1
    assert sizes[today.isoformat()] == 0
    assert redis_client.getbit(keys.first_active(calendar.day_name(today)), dense_id(redis_client, str(user.pk))) == 0


# --- the API -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("cohorts=91", "cohorts"),
        ("periods=91", "periods"),
        ("period=week&cohorts=27", "cohorts"),
        ("period=week&periods=27", "periods"),
        ("cohorts=0", "cohorts"),
        ("by=visits", "by"),
        ("period=month", "period"),
        ("group=x", "group"),
        ("cohorts=5&cohorts=6", "cohorts"),
    ],
)
def test_out_of_bounds_is_a_400_naming_the_field(staff_api, query, field):
    answer = staff_api.get(f"{URL}?{query}")
    assert answer.status_code == 400
    assert list(answer.json()) == [field]


def test_ninety_days_and_twenty_six_weeks_are_within_bounds(staff_api):
    assert staff_api.get(f"{URL}?cohorts=90&periods=90").status_code == 200
    assert staff_api.get(f"{URL}?period=week&cohorts=26&periods=26").status_code == 200


def test_an_unknown_group_is_a_404_as_on_the_group_routes(staff_api):
    answer = staff_api.get(f"{URL}?group=999999")
    assert answer.status_code == 404 and answer.json() == {"detail": "No such group."}


@pytest.mark.django_db
def test_the_view_permission_is_needed(member_api, member):
    assert APIClient().get(URL).status_code == 401
    assert member_api.get(URL).status_code == 403
    viewer = APIClient()
    viewer.force_authenticate(with_permissions(member, "activity.view_activity"))
    assert viewer.get(URL).status_code == 200


def test_the_answer_has_the_contract_shape(staff_api, at):
    now = clock.now()
    at(now)
    ingest.record_events([Event("3", now), Event("4", now - 86_400), Event("4", now)])
    answer = staff_api.get(f"{URL}?cohorts=2&periods=3")
    assert answer.status_code == 200 and answer["X-Cache"] == "miss"
    today = calendar.day_of(now)
    assert answer.json() == {
        "by": "first_seen",
        "period": "day",
        "time_zone": calendar.zone_name(),
        "cohorts": [
            {"start": (today - timedelta(days=1)).isoformat(), "size": 1, "retained": [1, 1]},
            {"start": today.isoformat(), "size": 1, "retained": [1]},
        ],
    }
    assert staff_api.get(f"{URL}?cohorts=2&periods=3")["X-Cache"] == "hit"


def counting_builds(monkeypatch) -> list[int]:
    builds: list[int] = []
    build = cohorts.build

    def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        builds.append(1)
        time.sleep(0.05)  # readers meet the build in flight
        return build(*args, **kwargs)

    monkeypatch.setattr(cohorts, "build", counted)
    return builds


def test_fifty_cold_readers_cause_one_build(redis_client, monkeypatch):
    ingest.record_events([Event("5", clock.now())])
    builds = counting_builds(monkeypatch)
    barrier, answers = threading.Barrier(50), []

    def read() -> None:
        barrier.wait()
        answers.append(cohorts.table(cohorts.Query()))

    threads = [threading.Thread(target=read) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1
    assert len(answers) == 50 and len({str(body) for body, _ in answers}) == 1


@override_settings(ACTIVITY_REPORT_TTL=1)
def test_one_build_per_expiry_and_stale_served_meanwhile(redis_client, monkeypatch):
    monkeypatch.setattr(reports, "STALE_S", 5)
    ingest.record_events([Event("5", clock.now())])
    cohorts.table(cohorts.Query())
    builds = counting_builds(monkeypatch)
    caches: list[str] = []
    started = time.monotonic()

    def reader() -> None:
        while time.monotonic() - started < 2.5:
            caches.append(cohorts.table(cohorts.Query())[1])
            time.sleep(0.02)

    threads = [threading.Thread(target=reader) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    assert "hit" in caches and "stale" in caches
    assert 2 <= len(builds) <= int(elapsed) + 1  # each build starts a fresh 1 s


# --- the rollup's cells ------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_rollup_keeps_cells_after_the_bitmaps_expire(redis_client, at, django_capture_on_commit_callbacks):
    now = clock.now()
    today = calendar.day_of(now)
    days = [today - timedelta(days=n) for n in range(5, 0, -1)]
    for n, day in enumerate(days):
        at(local(calendar.zone_name(), day, 3_600))
        ingest.record_events([Event(str(u), clock.now()) for u in range(1, 8) if (u + n) % 3 or u == 1])
    at(now)
    for day in days:
        audience.rollup_day(day)
    before = cohorts.build(cohorts.Query(cohorts=10, periods=10), now)
    assert RetentionCell.objects.filter(by="first_seen", period="day").exists()

    later = now + 40 * 86_400  # the days are past the active bitmaps' retention: their keys gone
    at(later)
    for day in days:
        redis_client.delete(keys.active_bits(calendar.day_name(day)))
    after = cohorts.build(cohorts.Query(cohorts=50, periods=50), later)
    kept = {row["start"]: row for row in after["cohorts"]}
    for row in before["cohorts"]:
        if row["start"] in {day.isoformat() for day in days}:
            old = kept[row["start"]]
            assert old["size"] == row["size"]
            reached = len([d for d in days if d.isoformat() >= row["start"]])
            assert old["retained"][:reached] == row["retained"][:reached]
            assert old["retained"][reached] is None  # a day the rollup never wrote
    assert kept[days[0].isoformat()]["size"] == 5  # users 1, 2, 4, 5, 7
    # Group tables: the rollup keeps site-wide cells only.
    group = Group.objects.create(name="rollup")
    with django_capture_on_commit_callbacks(execute=True):
        group.user_set.add(get_user_model().objects.create(username="g1", pk=1))
    grouped = cohorts.build(cohorts.Query(cohorts=50, periods=50, group=group.pk), later)
    first = next(row for row in grouped["cohorts"] if row["start"] == days[0].isoformat())
    assert first["size"] == 1 and first["retained"][0] is None


def test_periods_to_keep_name_the_day_and_the_one_leaving_redis():
    now = clock.now()
    today = calendar.day_of(now)
    yesterday = today - timedelta(days=1)
    kept = cohorts.periods_to_keep(yesterday, now)
    assert ("day", yesterday) in kept and ("day", today - timedelta(days=lifetimes.KEEP_DAYS)) in kept


def test_every_id_shape_is_in_cohorts_and_retained(redis_client, at):
    """A UUID, a huge integer, a 64-character string: each has a dense id, so each is in its first
    day's cohort and counted when active again, exactly, as an integer id is."""
    now = clock.now()
    at(now)
    users = ["11", "5f0c7d1e-1f3a-4c56-9a0b-2a4c1e9d7b11", str(2**63 - 1), "67108864", "u" * 64]
    ingest.record_events([Event(user, now - 86_400) for user in users])
    ingest.record_events([Event(user, now) for user in users[1:3]])
    found = cohorts.build(cohorts.Query(cohorts=2, periods=2), now)
    assert found["cohorts"][0] == {"start": found["cohorts"][0]["start"], "size": len(users), "retained": [5, 2]}


def test_signup_cohorts_come_from_date_joined(db, at):
    now = clock.now()
    at(now)
    today = calendar.day_of(now)
    joined = [get_user_model().objects.create(username=f"s{n}") for n in range(3)]
    ingest.record_events([Event(str(joined[0].pk), now)])
    found = cohorts.build(cohorts.Query(by="signup", cohorts=1, periods=1), now)
    assert found["cohorts"] == [{"start": today.isoformat(), "size": 3, "retained": [1]}]


def test_an_erase_clears_the_user_from_the_cohorts(redis_client, db, at):
    from activity.services import privacy

    now = clock.now()
    at(now)
    ingest.record_events([Event("9", now), Event("10", now)])
    ingest.record_events([Event("9", now - 86_400)])  # late: moved back a day
    nine = dense_id(redis_client, "9")
    privacy.erase("9")
    found = cohorts.build(cohorts.Query(cohorts=2, periods=2), now)
    assert [row["size"] for row in found["cohorts"]] == [0, 1]
    assert redis_client.execute_command("BITFIELD", keys.first_day(), "GET", "u16", f"#{nine}") == [0]
    assert redis_client.getbit(keys.first_moved(calendar.day_name(calendar.day_of(now) - timedelta(days=1))), nine) == 0
    assert dense_id(redis_client, "9") is None  # out of the map: the id is never assigned again


@pytest.mark.django_db
def test_the_rollup_of_a_sunday_keeps_the_weeks_cells(redis_client, at):
    now = clock.now()
    today = calendar.day_of(now)
    sunday = today - timedelta(days=today.weekday() + 1)  # the last Sunday before today
    week, before_week = week_of(sunday), week_of(sunday) - timedelta(days=7)
    zone = calendar.zone_name()
    for day, users in ((before_week + timedelta(days=2), range(1, 5)), (week + timedelta(days=3), (1, 2, 5, 6))):
        at(local(zone, day, 12 * 3_600))
        ingest.record_events([Event(str(user), clock.now()) for user in users])
    at(now)
    audience.rollup_day(sunday)
    assert RetentionCell.objects.filter(period="week", cohort=before_week, offset=1, retained=2).exists()
    query = cohorts.Query(period="week", cohorts=12, periods=12)
    before = {row["start"]: row for row in cohorts.build(query, now)["cohorts"]}

    later = now + 8 * 7 * 86_400  # the weeks' active bitmaps are past their retention
    at(later)
    after = {row["start"]: row for row in cohorts.build(query, later)["cohorts"]}
    old, new = after[before_week.isoformat()], after[week.isoformat()]
    assert (old["size"], new["size"]) == (4, 2)
    assert old["retained"][1] == before[before_week.isoformat()]["retained"][1] == 2  # from the rollup's row
    assert new["retained"][0] == before[week.isoformat()]["retained"][0] == 2
    assert old["retained"][0] is None  # that week's Sunday was never rolled up
