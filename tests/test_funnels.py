"""Funnels (docs/funnels.md): counted live on the write path, exactly as their definition says."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import OperationalError

from activity import calendar, permissions
from activity.events import Event
from activity.funnel_rules import MAX_FUNNELS
from activity.models import Funnel, FunnelCount
from activity.services import funnels, ingest, privacy
from activity.store import funnel_progress, keys, lifetimes
from activity.store import funnels as funnel_store
from activity.store.client import get_client
from tests.clients import APIClient, Client
from tests.conftest import with_permissions
from tests.redis_probe import RoundTrips
from tests.test_scripts import primaries, script_calls, script_names

pytestmark = pytest.mark.django_db

DAY = date(2026, 11, 25)  # a Wednesday


def noon(day: date = DAY) -> float:
    return calendar.midnight(day).timestamp() + 12 * 3600


def define(steps: list[str], window: int = 3600, mode: str = "sequential", created: float | None = None) -> Funnel:
    funnel = Funnel.objects.create(name="f", steps=steps, window=window, mode=mode)
    Funnel.objects.filter(pk=funnel.pk).update(created=calendar.utc(noon() - 86400 if created is None else created))
    funnels.forget()
    return Funnel.objects.get(pk=funnel.pk)


def view(user: str, ts: float, path: str) -> Event:
    return Event(user=user, ts=ts, path=path)


def people(funnel: Funnel, period: str = "day", day: date = DAY) -> list[int]:
    return [step["people"] for step in funnels.report(funnel, period, day)["steps"]]


def test_sequential_steps_count_people_once_within_the_window(at):
    at(noon() + 7200)
    funnel = define(["/pricing", "/signup", "/welcome*"])
    t = noon()
    ingest.record_events(
        [
            view("1", t, "/pricing"),
            view("1", t + 10, "/blog"),  # another page between steps: allowed
            view("1", t + 20, "/signup"),
            view("1", t + 30, "/welcome/team"),
            view("1", t + 40, "/pricing"),  # again: still one person
            view("2", t, "/pricing"),
            view("2", t + 3601, "/signup"),  # past the window
            view("3", t, "/signup"),  # no entry
            view("3", t + 5, "/welcome"),
        ]
    )
    assert people(funnel) == [2, 1, 1]
    report = funnels.report(funnel, "day", DAY)
    assert report["steps"][1] == {
        "step": 2,
        "path": "/signup",
        "people": 1,
        "conversion": 0.5,
        "from_previous": 0.5,
        "dropped": 1,
    }
    assert people(funnel, "week") == people(funnel, "month") == [2, 1, 1]


def test_strict_steps_are_the_very_next_page_views(at):
    at(noon() + 7200)
    funnel = define(["/a", "/b"], mode="strict")
    t = noon()
    ingest.record_events(
        [
            view("1", t, "/a"),
            view("1", t + 1, "/x"),
            view("1", t + 2, "/b"),  # not next after /a
            view("2", t, "/a"),
            view("2", t + 1, "/b"),
        ]
    )
    assert people(funnel) == [2, 1]


def test_a_later_entry_goes_on_where_an_earlier_one_runs_out_of_window(at):
    at(noon() + 7200)
    funnel = define(["/a", "/b", "/c"], window=60)
    t = noon()
    # Both entries reach /b; only the later one is still within its window at /c.
    ingest.record_events([view("1", t, "/a"), view("1", t + 30, "/a"), view("1", t + 40, "/b")])
    ingest.record_events([view("1", t + 80, "/c")])
    assert people(funnel) == [1, 1, 1]


def test_entries_count_in_their_own_day(at):
    at(noon(DAY + timedelta(days=1)) + 7200)
    funnel = define(["/a", "/b"], window=86400)
    late = calendar.midnight(DAY + timedelta(days=1)).timestamp() - 60  # a minute before midnight
    ingest.record_events([view("1", late, "/a"), view("1", late + 120, "/a"), view("1", late + 180, "/b")])
    assert people(funnel, "day", DAY) == [1, 1]
    assert people(funnel, "day", DAY + timedelta(days=1)) == [1, 1]
    assert people(funnel, "week", DAY) == [1, 1]


def test_a_view_older_than_one_already_taken_is_left_out(at):
    at(noon() + 7200)
    funnel = define(["/a", "/b"])
    t = noon()
    ingest.record_events([view("1", t + 10, "/a")])
    ingest.record_events([view("1", t + 5, "/b")])  # arrives late, before /a in time
    assert people(funnel) == [1, 0]


def test_views_before_the_funnel_was_created_are_not_counted(at):
    t = noon()
    at(t + 7200)
    funnel = define(["/a", "/b"], created=t + 1)
    ingest.record_events([view("1", t, "/a"), view("1", t + 2, "/b"), view("2", t + 3, "/a")])
    assert people(funnel) == [1, 0]


def test_no_funnel_no_funnel_call_and_one_call_per_partition_with_funnels(at):
    at(noon() + 7200)
    client = get_client()
    events = [view(str(n), noon(), "/a") for n in range(40)]
    names = script_names()

    def calls() -> tuple[int, list[list[bytes]]]:
        """The batch's round trips, and the commands each ``funnel_commit`` call ran, by name. A call
        that ran none met a server without the script (NOSCRIPT), and ran again once it was loaded."""
        with RoundTrips() as sent:
            found = script_calls(primaries(client), lambda: ingest.record_events(events))
        runs = [[command[0].upper() for command in run] for sha, _, run in found if names.get(sha) == "funnel_commit"]
        return sent.count, [run for run in runs if run]

    assert calls() == (1, [])
    define(["/a", "/b"])
    partitions = {funnel_store.partition_of(funnels.user_person(event.user)) for event in events}
    trips, runs = calls()
    # The batch's round trip reads the people's states; one more writes them back, a call per partition.
    assert trips == 2 and len(runs) == len(partitions)
    # Each call looks its people up in one HMGET per live generation, whatever their number (new
    # people: in every one), and writes them all back with one HSET into the current generation.
    live = len(lifetimes.FUNNEL_STATES.live(DAY))
    assert all(run.count(b"HMGET") == live and run.count(b"HSET") == 1 and b"HGET" not in run for run in runs)
    # The batch's people again: each found in the current generation, so one HMGET a call.
    events = [view(str(n), noon() + 1, "/b") for n in range(40)]
    trips, runs = calls()
    assert trips == 2 and all(run.count(b"HMGET") == 1 and run.count(b"HSET") == 1 for run in runs)


# The last day of a generation of funnel states (day number 20769: 670 generations of 31 days, less one).
GENERATION_ENDS = date(2026, 11, 12)


def test_a_state_in_an_older_generation_moves_on_into_the_current_one(at, redis_client):
    """Progress written on a generation's last day is found the next day, moves on, and goes into
    the new generation, leaving the old one; the new one lives its generation plus 62 days."""
    generations = lifetimes.FUNNEL_STATES
    old, new = generations.of(GENERATION_ENDS), generations.of(GENERATION_ENDS + timedelta(days=1))
    assert new == old + 1
    t = noon(GENERATION_ENDS)
    funnel = define(["/a", "/b"], window=86400, created=t - 3600)
    at(t)
    ingest.record_events([view("1", t, "/a"), view("2", t, "/a")])
    at(t + 22 * 3600)  # 10:00 the next day
    ingest.record_events([view("1", t + 22 * 3600, "/b")])
    privacy.erase("2")  # looks in the older generation too
    assert funnel_store.read_states(get_client(), ["u:2"], t + 22 * 3600) == {"u:2": None}
    person, partition = "u:1", funnel_store.partition_of("u:1")
    assert not redis_client.hexists(keys.funnel_states(partition, old), person)
    assert funnel_progress.exported(redis_client.hget(keys.funnel_states(partition, new), person))["latest_view"] == (
        t + 22 * 3600
    )
    assert people(funnel, "day", GENERATION_ENDS) == [2, 1]  # counted on the entry's day, once
    kept = generations.ttl(new, t + 22 * 3600)  # 92 days and 14 hours: written on the generation's first day
    assert kept - 30 <= redis_client.ttl(keys.funnel_states(partition, new)) <= kept


def test_the_upgrade_moves_an_earlier_releases_states_into_the_generations(at, redis_client, capsys):
    """A state an earlier release kept in a key of its own goes on where it was (the person is not
    counted again at step 1, and is at step 2); a state this release wrote since stays; a second run
    moves nothing."""
    at(noon() + 7200)
    funnel = define(["/a", "/b"])
    ingest.record_events([view("1", noon(), "/a"), view("2", noon(), "/a")])
    assert people(funnel) == [2, 0]
    client = get_client()
    states = funnel_store.read_states(client, ["u:1", "u:2"], noon() + 7200)
    earlier, written = funnel_store.person_home("u:1", noon()), funnel_store.person_home("u:2", noon())
    # Person 1's progress as an earlier release kept it; person 2 has an earlier key too, older than
    # what this release wrote for them.
    redis_client.hdel(earlier.generations[0], "u:1")
    redis_client.set(earlier.former, states["u:1"], ex=3600)
    redis_client.set(written.former, '{"t":1,"f":{}}', ex=3600)
    call_command("activity_upgrade")
    assert "moved 1 funnel states" in capsys.readouterr().out
    assert funnel_store.read_states(client, ["u:1", "u:2"], noon() + 7200) == states
    assert not redis_client.exists(earlier.former, written.former)
    ingest.record_events([view("1", noon() + 60, "/a"), view("1", noon() + 70, "/b")])
    assert people(funnel) == [2, 1]
    call_command("activity_upgrade")
    assert "moved 0 funnel states" in capsys.readouterr().out


def test_a_person_written_by_another_process_between_read_and_write_is_moved_on_again(at):
    """Two batches read the same person's (missing) state; the second writes after the first did,
    so it reads the state again and moves it on from there: step 1 is counted once. A write that
    did not check would count the person at step 1 twice."""
    at(noon() + 7200)
    funnel = define(["/a", "/b"])
    person = funnels.user_person("1")
    pipe = get_client().pipeline(transaction=False)
    first = funnels.queue_views(pipe, [(person, noon(), "/a")], noon() + 7200)
    second = funnels.queue_views(pipe, [(person, noon() + 1, "/a"), (person, noon() + 2, "/b")], noon() + 7200)
    pipe.execute()
    funnels.advance(first, noon() + 7200)
    funnels.advance(second, noon() + 7200)
    assert people(funnel) == [1, 1]
    state = funnel_store.read_states(get_client(), [person], noon() + 7200)[person]
    assert funnel_progress.exported(state)["latest_view"] == noon() + 2


def test_bots_and_machines_never_count(at):
    at(noon() + 7200)
    funnel = define(["/a", "/b"])
    ingest.record_events([view("1", noon(), "/a")], kind="bot")
    assert people(funnel) == [0, 0]


def test_rollup_keeps_final_periods_and_reports_read_them(at):
    at(noon() + 7200)  # the views are recent: on the machine's clock they would fall out of the statistics
    funnel = define(["/a", "/b"], window=3600, created=noon() - 60)
    ingest.record_events([view("1", noon(), "/a"), view("1", noon() + 60, "/b"), view("2", noon(), "/a")])
    at(noon(DAY + timedelta(days=1)))
    assert funnels.keep_counts(noon(DAY + timedelta(days=1))) == 2  # the day; its week and month go on
    assert set(FunnelCount.objects.values_list("period", "start", "step", "people")) == {
        ("day", DAY, 1, 2),
        ("day", DAY, 2, 1),
    }
    get_client().delete(*(keys.funnel_counts(n, "202611") for n in range(funnel_store.PARTITIONS)))  # forgotten
    assert people(funnel) == [2, 1]
    assert people(funnel, "week") == [0, 0]


# --- the API, the admin, visitors, erase ---------------------------------------------------------


def api_as(name: str, *granted: str) -> APIClient:
    api = APIClient()
    api.force_authenticate(with_permissions(get_user_model().objects.create_user(name, is_staff=True), *granted))
    return api


@pytest.fixture
def definer_api(db) -> APIClient:
    """Staff who read funnels and define them."""
    return api_as("definer", permissions.VIEW_ACTIVITY, permissions.DEFINE_FUNNELS)


SIGNUP = {"name": "signup", "steps": ["/pricing", "/signup", "/welcome*"], "window": 3600, "mode": "sequential"}


def test_api_defines_lists_reports_and_deletes_a_funnel(definer_api, at):
    at(noon())
    created = definer_api.post("/api/v1/funnels/", SIGNUP, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert {key: body[key] for key in SIGNUP} == SIGNUP
    ingest.record_events([view("7", noon() + 1, "/pricing"), view("7", noon() + 2, "/signup")])
    report = definer_api.get(f"/api/v1/funnels/{body['id']}/?period=week&date={DAY.isoformat()}")
    assert report.status_code == 200
    assert report.json()["start"] == (DAY - timedelta(days=DAY.weekday())).isoformat()
    assert [step["people"] for step in report.json()["steps"]] == [1, 1, 0]
    assert report.json()["steps"][2]["dropped"] == 1
    assert definer_api.get("/api/v1/funnels/").json()["count"] == 1
    assert definer_api.delete(f"/api/v1/funnels/{body['id']}/").status_code == 204
    assert definer_api.get(f"/api/v1/funnels/{body['id']}/").status_code == 404


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"steps": ["/pricing"]}, "steps"),
        ({"steps": ["/a"] * 33}, "steps"),
        ({"steps": ["/a", "b"]}, "steps"),
        ({"steps": ["/a", "/b*c"]}, "steps"),
        ({"steps": ["/a", "/b?x=1"]}, "steps"),
        ({"steps": ["/a", "/b\u0000"]}, "steps"),
        ({"steps": "/a,/b"}, "steps"),
        ({"window": 59}, "window"),
        ({"window": 2_592_001}, "window"),
        ({"mode": "any"}, "mode"),
        ({"name": ""}, "name"),
    ],
)
def test_a_bad_definition_is_a_400_naming_the_field_and_defines_nothing(definer_api, change, field):
    answer = definer_api.post("/api/v1/funnels/", {**SIGNUP, **change}, format="json")
    assert answer.status_code == 400
    assert field in answer.json()
    assert not Funnel.objects.exists()


def test_funnels_are_bounded_in_number(definer_api):
    for _ in range(MAX_FUNNELS):
        assert definer_api.post("/api/v1/funnels/", SIGNUP, format="json").status_code == 201
    refused = definer_api.post("/api/v1/funnels/", SIGNUP, format="json")
    assert refused.status_code == 400 and "non_field_errors" in refused.json()


def test_reading_needs_the_view_permission_and_defining_its_own(member_api, definer_api):
    funnel = define(["/a", "/b"])
    viewer = api_as("viewer", permissions.VIEW_ACTIVITY)
    assert member_api.get("/api/v1/funnels/").status_code == 403
    assert member_api.get(f"/api/v1/funnels/{funnel.pk}/").status_code == 403
    assert viewer.get(f"/api/v1/funnels/{funnel.pk}/").status_code == 200
    assert viewer.post("/api/v1/funnels/", SIGNUP, format="json").status_code == 403
    assert viewer.delete(f"/api/v1/funnels/{funnel.pk}/").status_code == 403
    assert definer_api.get("/api/v1/funnels/x/").status_code == 400
    assert definer_api.get(f"/api/v1/funnels/{funnel.pk}/?period=year").status_code == 400
    assert definer_api.get(f"/api/v1/funnels/{funnel.pk}/?date=2026-13-01").status_code == 400


def test_the_admin_defines_a_funnel_from_lines_and_never_edits_one(admin_client):
    added = admin_client.post(
        "/admin/activity/funnel/add/",
        {"name": "signup", "steps": "/pricing\n/signup\n\n/welcome*\n", "window": 3600, "mode": "strict"},
    )
    assert added.status_code == 302, added.content
    funnel = Funnel.objects.get()
    assert (funnel.steps, funnel.mode) == (["/pricing", "/signup", "/welcome*"], "strict")
    refused = admin_client.post(
        "/admin/activity/funnel/add/", {"name": "x", "steps": "/pricing", "window": 3600, "mode": "strict"}
    )
    assert refused.status_code == 200 and b"Give a list of 2 to 32 paths" in refused.content
    assert admin_client.get("/admin/activity/funnel/").status_code == 200
    page = admin_client.get(f"/admin/activity/funnel/{funnel.pk}/change/")
    assert page.status_code == 200 and b'name="steps"' not in page.content  # read-only


@pytest.mark.urls("tests.pages")
def test_a_cookie_visitor_is_a_person_of_the_funnel(at):
    at(noon())
    funnel = define(["/admin/login/", "/pricing"])
    browser = Client(REMOTE_ADDR="203.0.113.9")
    browser.get("/admin/login/")  # the cookie is issued; the visit counts once the browser sends it back
    browser.get("/admin/login/")
    browser.get("/pricing")
    assert people(funnel) == [1, 1]


def test_erase_removes_the_users_funnel_state_and_export_shows_it(staff_api, at):
    at(noon() + 60)
    funnel = define(["/a", "/b"])
    ingest.record_events([view("9", noon(), "/a")])
    exported = staff_api.get("/api/v1/users/9/activity/export/").json()["funnels"]
    assert exported["latest_view"] == noon()
    (progress,) = exported["progress"]
    assert progress["funnel"] == funnel.pk and progress["in_progress"][0][:2] == [1, noon()]
    assert progress["counted"] == {f"d:{calendar.day_name(DAY)}": 1, "w:2026W48": 1, "m:202611": 1}
    assert staff_api.delete("/api/v1/users/9/activity/").status_code == 204
    person = funnels.user_person("9")
    assert funnel_store.read_states(get_client(), [person], noon() + 60) == {person: None}
    ingest.record_events([view("9", noon() + 1, "/a")])  # a late view of the erased user: skipped
    assert funnel_store.read_states(get_client(), [person], noon() + 60) == {person: None}


def test_a_database_that_cannot_answer_keeps_the_definitions_read_last(at, monkeypatch, caplog):
    at(noon() + 7200)
    funnel = define(["/a", "/b"])
    ingest.record_events([view("1", noon(), "/a")])  # the definitions read
    funnels.forget()

    def unavailable() -> list:
        raise OperationalError("the database went away")

    monkeypatch.setattr(funnels, "read_definitions", unavailable)
    ingest.record_events([view("1", noon() + 1, "/b")])
    assert people(funnel) == [1, 1]
    assert "funnel definitions not read" in caplog.text
