"""Members of a group active today, this ISO week or this month (docs/groups.md): exact against a
brute-force set computation over a random history around local midnights, one round trip of bounded
commands, membership bitmaps that follow every change and a rebuild from the database, and the API's
validation and permissions per docs/api.md."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import override_settings

from activity import calendar, clock
from activity.events import Event
from activity.services import groups, ingest, sweep
from activity.store import keys
from activity.store.scripts import LUA_DIR, LuaScript
from project.redis_server import free_port
from tests.clients import APIClient
from tests.conftest import local_midnight
from tests.redis_counts import CommandDelta
from tests.redis_probe import RoundTrips
from tests.traces import dense_id

ZONE = "America/New_York"
PERIODS = ("day", "week", "month")


def make_users(count: int, prefix: str = "u") -> list[str]:
    User = get_user_model()
    return [str(u.pk) for u in User.objects.bulk_create(User(username=f"{prefix}{n}") for n in range(count))]


def member_bits(redis_client, group_id: int, users: list[str]) -> set[str]:
    dense = {user: dense_id(redis_client, user) for user in users}
    return {user for user in users if dense[user] and redis_client.getbit(keys.group_members(group_id), dense[user])}


def db_members(group: Group) -> set[str]:
    return {str(pk) for pk in group.user_set.values_list("pk", flat=True)}


def api(staff_api, group_id: int, period: str | None = None) -> dict:
    query = "" if period is None else f"?period={period}"
    response = staff_api.get(f"/api/v1/groups/{group_id}/active/{query}")
    assert response.status_code == 200, response.content
    return response.json()


# --- the API --------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_counts_members_active_in_the_local_day_week_and_month(at, staff_api, redis_client):
    day = date(2026, 11, 25)  # a Wednesday
    users = make_users(6)
    group = Group.objects.create(name="team")
    group.user_set.add(*users[:4])
    groups.rebuild_memberships()
    with override_settings(ACTIVITY_TIME_ZONE=ZONE):
        at(local_midnight(ZONE, day) + 3600)
        ingest.record_events(
            [
                Event(user=users[0], ts=local_midnight(ZONE, day) + 10),  # today
                Event(user=users[1], ts=local_midnight(ZONE, day) - 10),  # yesterday: this week, this month
                Event(user=users[2], ts=local_midnight(ZONE, date(2026, 11, 23)) - 10),  # last week, this month
                Event(user=users[3], ts=local_midnight(ZONE, date(2026, 11, 1)) - 10),  # October
                Event(user=users[4], ts=local_midnight(ZONE, day) + 20),  # not a member
            ]
        )
        assert api(staff_api, group.pk) == {
            "group": group.pk,
            "period": "day",
            "active": 1,
            "members": 4,
            "day": "2026-11-25",
        }
        assert {period: api(staff_api, group.pk, period)["active"] for period in PERIODS} == {
            "day": 1,
            "week": 2,
            "month": 3,
        }
        empty = Group.objects.create(name="empty")
        assert api(staff_api, empty.pk, "month") | {"day": None} == {
            "group": empty.pk,
            "period": "month",
            "active": 0,
            "members": 0,
            "day": None,
        }


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/groups/abc/active/", "group_id"),
        ("/api/v1/groups/0/active/", "group_id"),
        ("/api/v1/groups/01/active/", "group_id"),
        ("/api/v1/groups/99999999999999999999/active/", "group_id"),
        ("/api/v1/groups/{pk}/active/?period=year", "period"),
        ("/api/v1/groups/{pk}/active/?period=", "period"),
        ("/api/v1/groups/{pk}/active/?period=day&period=week", "period"),
    ],
)
def test_bad_input_is_400_naming_the_field_and_writes_nothing(staff_api, redis_client, path, field):
    group = Group.objects.create(name="g")
    before = set(redis_client.scan_iter(match=f"{keys.prefix()}{{au}}:group*"))
    response = staff_api.get(path.format(pk=group.pk))
    assert response.status_code == 400
    assert field in response.json() and isinstance(response.json()[field], list)
    assert set(redis_client.scan_iter(match=f"{keys.prefix()}{{au}}:group*")) == before


def test_permissions_and_unknown_group(staff_api, member_api, redis_client):
    group = Group.objects.create(name="g")
    url = f"/api/v1/groups/{group.pk}/active/"
    assert APIClient().get(url).status_code == 401
    assert member_api.get(url).status_code == 403
    missing = staff_api.get(f"/api/v1/groups/{group.pk + 1000}/active/?period=week")
    assert missing.status_code == 404 and missing.json() == {"detail": "No such group."}


def test_the_schema_documents_the_endpoint(staff_api):
    schema = staff_api.get("/api/v1/schema/?format=json").json()
    operation = schema["paths"]["/api/v1/groups/{group_id}/active/"]["get"]
    assert {p["name"] for p in operation["parameters"]} >= {"group_id", "period"}
    assert {"200", "400", "401", "403", "404"} <= set(operation["responses"])


def test_redis_down_is_503_and_a_membership_change_still_commits(
    staff_api, redis_client, django_capture_on_commit_callbacks, caplog
):
    group = Group.objects.create(name="g")
    users = make_users(2)
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):
        response = staff_api.get(f"/api/v1/groups/{group.pk}/active/")
        assert response.status_code == 503 and response["Retry-After"] == "5"
        with django_capture_on_commit_callbacks(execute=True):
            group.user_set.add(*users)  # the admin's save does not fail
    assert db_members(group) == set(users)
    assert "run activity_backfill" in caplog.text
    assert member_bits(redis_client, group.pk, users) == set()  # until the rebuild
    groups.rebuild_memberships()
    assert member_bits(redis_client, group.pk, users) == set(users)


ODD_IDS = ["5f0c7d1e-1f3a-4c56-9a0b-2a4c1e9d7b11", "alice", "007", str(2**26 + 1), str(2**63 - 1), "x" * 64]


def test_every_id_shape_is_a_member_and_counted_active(redis_client):
    """A UUID, a string, a huge integer: each member gets a dense id, the same bit the active-user
    bitmaps use, so the group's active count is exact whatever the ids look like."""
    client = groups.get_client()
    now = clock.now()
    groups.store.write_members(client, [(7, user) for user in [*ODD_IDS, "12"]], [], [], now)
    assert member_bits(redis_client, 7, [*ODD_IDS, "12"]) == {*ODD_IDS, "12"}
    assert groups.store.replace_members(client, {8: ODD_IDS}, now) == len(ODD_IDS)
    ingest.record_events([Event(user=user, ts=now) for user in [*ODD_IDS[:3], "12", "outsider"]])
    assert groups.store.active_members(client, [7, 8], "day", calendar.day_of(now)) == [4, 3]


# --- cost -----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_one_round_trip_of_one_script_whatever_the_group_size(redis_client, django_assert_num_queries):
    for script in LUA_DIR.glob("*.lua"):
        redis_client.script_load(LuaScript(script.stem).source)
    users = make_users(400)
    ingest.record_events([Event(user=user, ts=clock.now()) for user in users[::3]])
    small, large = Group.objects.create(name="small"), Group.objects.create(name="large")
    small.user_set.add(*users[:4])
    large.user_set.add(*users)
    groups.rebuild_memberships()
    calls = {}
    for group, expected in ((small, 2), (large, len(users[::3]))):
        with django_assert_num_queries(1), CommandDelta(redis_client) as delta, RoundTrips() as sent:
            found = groups.active_members(group.pk, "day")
        assert (found.active, sent.count) == (expected, 1)
        calls[group.name] = delta.calls
    # The same commands for 4 members as for 400: one EVALSHA running BITOP AND, BITCOUNT and DEL of
    # the scratch key (two EXISTS first); nothing else, and no key left behind.
    assert calls["small"] == calls["large"]
    assert calls["large"] == {"evalsha": 1, "exists": 2, "bitop": 1, "bitcount": 1, "del": 1}
    assert redis_client.exists(keys.group_active_scratch()) == 0


# --- membership -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_membership_changes_are_reflected(staff_api, redis_client, django_capture_on_commit_callbacks):
    User = get_user_model()
    users = make_users(5)
    ingest.record_events([Event(user=user, ts=clock.now()) for user in users])
    group, other = Group.objects.create(name="g"), Group.objects.create(name="other")

    def changed(action) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            action()
        for each in (group, other):
            assert member_bits(redis_client, each.pk, users) == db_members(each)
            assert api(staff_api, each.pk)["active"] == len(db_members(each))
            assert api(staff_api, each.pk)["members"] == len(db_members(each))

    changed(lambda: group.user_set.add(*users[:3]))  # reverse side
    changed(lambda: User.objects.get(pk=users[3]).groups.add(group, other))  # forward side
    changed(lambda: group.user_set.remove(users[0]))
    changed(lambda: User.objects.get(pk=users[1]).groups.remove(group))
    changed(lambda: User.objects.get(pk=users[3]).groups.clear())
    changed(lambda: other.user_set.add(*users))
    changed(lambda: User.objects.get(pk=users[4]).delete())
    changed(lambda: other.user_set.clear())
    assert member_bits(redis_client, group.pk, users) == {users[2]}
    changed(lambda: group.user_set.add(*users[:2]))
    pk = group.pk
    with django_capture_on_commit_callbacks(execute=True):
        group.delete()
    assert redis_client.exists(keys.group_members(pk)) == 0
    assert staff_api.get(f"/api/v1/groups/{pk}/active/").status_code == 404


@pytest.mark.django_db
def test_backfill_rebuilds_the_bitmaps_from_the_database(redis_client):
    users = make_users(12)
    teams = [Group.objects.create(name=f"t{n}") for n in range(5)]
    rng = random.Random(5)
    for team in teams[:4]:  # the last group has no members
        team.user_set.add(*rng.sample(users, rng.randint(1, 8)))
    # Bitmaps gone wrong (written while Redis was away, or never written): a stray bit, a missing
    # one, a bitmap for the empty group.
    redis_client.setbit(keys.group_members(teams[0].pk), 999, 1)
    redis_client.delete(keys.group_members(teams[1].pk))
    redis_client.setbit(keys.group_members(teams[4].pk), int(users[0]), 1)
    out = []
    call_command("activity_backfill", "--no-progress", stdout=type("Out", (), {"write": out.append, "flush": id})())
    memberships = sum(len(db_members(team)) for team in teams)
    assert f"activity_backfill: 5 groups rebuilt, {memberships} memberships with a bit." in "".join(out)
    for team in teams:
        assert member_bits(redis_client, team.pk, [*users, "999"]) == db_members(team)
    assert redis_client.exists(keys.group_members(teams[4].pk)) == 0
    # Batches: the same whatever the batch size.
    redis_client.delete(*(keys.group_members(team.pk) for team in teams))
    assert groups.rebuild_memberships(batch_size=2) == groups.MembershipRebuild(groups=5, bits=memberships)
    for team in teams:
        assert member_bits(redis_client, team.pk, users) == db_members(team)


@pytest.mark.django_db
def test_the_bitmap_is_long_lived_and_the_scratch_key_never_stays(redis_client):
    users = make_users(3)
    group = Group.objects.create(name="g")
    group.user_set.add(*users)
    groups.rebuild_memberships()
    groups.active_members(group.pk, "week")
    assert redis_client.ttl(keys.group_members(group.pk)) == -1
    assert sweep.sweep().deleted == 0 and redis_client.exists(keys.group_members(group.pk)) == 1
    redis_client.set(keys.group_active_scratch(), "x")  # planted: as if a script had died mid-way
    assert sweep.sweep().deleted == 1


# --- against a model ------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(("seed", "mirrored_by"), [(37, "signals"), (2026, "rebuild")])
def test_counts_equal_a_brute_force_over_a_random_history(
    at, staff_api, redis_client, django_capture_on_commit_callbacks, seed, mirrored_by
):
    """Random users, groups, memberships (added, then some removed) and events just before and
    after local midnights in New York, over an ISO week's end, a month's end and the end of
    daylight saving time (a 25-hour day), recorded out of order. Every group's day, week and month
    count, at instants either side of each midnight, equals the set count. The bitmaps come from
    the signals as membership changes, or from a rebuild after it changed."""
    rng = random.Random(seed)
    days = [date(2026, 10, 27) + timedelta(days=n) for n in range(9)]  # Tue 27 Oct .. Wed 4 Nov
    users = make_users(40)
    teams = [Group.objects.create(name=f"team{n}") for n in range(5)]
    with django_capture_on_commit_callbacks(execute=mirrored_by == "signals"):
        for team in teams:
            team.user_set.add(*rng.sample(users, rng.randint(0, 25)))
        for team in teams[:3]:
            leaving = sorted(db_members(team))
            team.user_set.remove(*rng.sample(leaving, min(2, len(leaving))))
    if mirrored_by == "rebuild":
        groups.rebuild_memberships()

    with override_settings(ACTIVITY_TIME_ZONE=ZONE):
        active: dict[date, set[str]] = {day: set() for day in days}
        events = []
        for day in days:
            midnight = local_midnight(ZONE, day)
            for user in rng.sample(users, rng.randint(0, 12)):
                ts = midnight + rng.choice([-1.0, -0.001, 0.0, 0.001, 1.0, 3600.0]) * rng.random()
                events.append(Event(user=user, ts=ts))
                active[calendar.day_of(ts)] = active.get(calendar.day_of(ts), set()) | {user}
        rng.shuffle(events)  # late and out of order
        at(local_midnight(ZONE, days[-1] + timedelta(days=1)))
        for start in range(0, len(events), 7):
            ingest.record_events(events[start : start + 7])

        def expected(period: str, today: date, members: set[str]) -> int:
            seen = set()
            for day, who in active.items():
                if calendar.name_of(period, day) == calendar.name_of(period, today):
                    seen |= who
            return len(seen & members)

        checked, counted = 0, set()
        for day in days[1:]:
            for ts in (local_midnight(ZONE, day) - 0.5, local_midnight(ZONE, day) + 0.5):
                at(ts)
                today = calendar.day_of(ts)
                for team in teams:
                    members = db_members(team)
                    for period in PERIODS:
                        found = groups.active_members(team.pk, period)
                        assert (found.active, found.members, found.day) == (
                            expected(period, today, members),
                            len(members),
                            today,
                        ), (team.name, period, ts)
                        checked += 1
                        counted.add(found.active)
        body = api(staff_api, teams[0].pk, "week")
        assert body["active"] == expected("week", calendar.day_of(clock.now()), db_members(teams[0]))
    assert checked == 8 * 2 * 5 * 3 and len(counted) > 5  # and the counts are not all alike
