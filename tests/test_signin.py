"""Sign-in continues the visitor (docs/visitors.md#signing-in): the session's pages, the funnel
progress and a link, against the run's real Redis and database, through the admin's login form."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.http import HttpResponse
from django.test import override_settings
from django.urls import include, path

from activity import calendar, conf
from activity.events import Event
from activity.models import Funnel
from activity.services import audience, funnels, ingest, pages_now, sessions, signin
from activity.store import audience as audience_store
from activity.store import funnel_progress, keys, lifetimes
from activity.store import funnels as funnel_store
from activity.store.client import get_client
from activity.store.scripts import LUA_DIR, LuaScript
from activity.web import middleware
from tests.clients import Client
from tests.redis_counts import CommandDelta
from tests.redis_probe import RoundTrips

NOON = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()
DAY = calendar.day_of(NOON)
VISITOR = "0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210"


def page(request):
    return HttpResponse("<html><body>a page</body></html>", content_type="text/html")


# The site's pages for these tests, before the example project's (the admin and the API).
urlpatterns = [path(name, page) for name in ("pricing", "docs", "welcome")]
urlpatterns.append(path("", include("project.urls")))

pytestmark = [pytest.mark.urls("tests.test_signin"), pytest.mark.django_db]


@pytest.fixture
def at(at):
    at(NOON)
    return at


@pytest.fixture
def loaded(redis_client):
    """Every script loaded, so a count of round trips holds no NOSCRIPT recovery."""
    for script in LUA_DIR.glob("*.lua"):
        redis_client.script_load(LuaScript(script.stem).source)


def sign_in(browser: Client) -> None:
    """The admin's login form, as a browser posts it (pytest-django's ``admin_user``)."""
    answer = browser.post("/admin/login/", {"username": "admin", "password": "password", "next": "/admin/"})
    assert answer.status_code == 302, answer.content[:300]


def visitor_of(browser: Client) -> str:
    visitor = middleware.visitor_from_cookie(browser.cookies[middleware.VISITOR_COOKIE_NAME].value)
    assert visitor is not None
    return visitor


def visits(visitor: str, *views: tuple[float, str]) -> None:
    """A visitor's page views, as the middleware's batches hand them to ingest."""
    ingest.record_events(
        [],
        visitors=[(visitor, ts) for ts, _ in views],
        visitor_views=[(visitor, ts, p) for ts, p in views],
        day_writes=ingest.PROCESS_DAY_WRITES,
    )


def define(steps: list[str], window: int = 3600) -> Funnel:
    funnel = Funnel.objects.create(name="signup", steps=steps, window=window, mode="sequential")
    Funnel.objects.filter(pk=funnel.pk).update(created=calendar.utc(NOON - 86400))
    funnels.forget()
    return Funnel.objects.get(pk=funnel.pk)


def people(funnel: Funnel) -> list[int]:
    return [step["people"] for step in funnels.report(funnel, "day", DAY)["steps"]]


def test_signing_in_through_the_admin_form_starts_the_users_session_with_the_visitors_pages(
    at, admin_user, redis_client
):
    browser = Client()
    browser.get("/pricing")  # the cookie is issued; nothing is recorded until it comes back
    visitor = visitor_of(browser)
    at(NOON + 1)
    browser.get("/pricing")
    at(NOON + 2)
    browser.get("/docs")
    assert signin.visitor_session(visitor) == [("/pricing", NOON + 1), ("/docs", NOON + 2)]
    at(NOON + 3)
    sign_in(browser)
    at(NOON + 4)
    browser.get("/welcome")
    answer = browser.get(f"/api/v1/users/{admin_user.pk}/session/")
    assert answer.status_code == 200
    body = answer.json()
    assert [(row["path"], row["ts"]) for row in body["results"]] == [
        ("/welcome", NOON + 4),
        ("/docs", NOON + 2),
        ("/pricing", NOON + 1),
    ]
    assert body["count"] == 3
    # Joining counts nothing again: the day's page views and paths are the user's one view, the
    # transitions the one step the user took from the visitor's last page, one session started.
    assert sessions.page_views(DAY) == 1 and sessions.top_paths(DAY) == [("/welcome", 1)]
    assert sessions.started(DAY) == 1
    steps = redis_client.zrange(keys.transitions(calendar.day_name(DAY)), 0, -1, withscores=True)
    assert steps == [("/docs\0/welcome", 1.0)]
    # The visitor's session moved; the visitor is the user's.
    assert signin.visitor_session(visitor) == []
    assert signin.linked_user(visitor) == str(admin_user.pk)
    assert signin.linked(str(admin_user.pk)) == [(visitor, NOON + 3)]


def test_the_pages_merge_in_time_order_into_a_live_session_capped_oldest_dropped(at, redis_client):
    ingest.record_events([Event("42", NOON - 30, "/a"), Event("42", NOON - 10, "/c")])
    visits(VISITOR, (NOON - 20, "/b"), (NOON - 5, "/d"), (NOON - 20, "/b2"))
    day = calendar.day_name(DAY)
    steps_before = redis_client.zrange(keys.transitions(day), 0, -1, withscores=True)
    views_before = sessions.page_views(DAY)
    joined = signin.continue_visitor(VISITOR, "42")
    assert (joined.pages, joined.session_length) == (3, 5)
    # Equal times keep arrival order, the visitor's before the user's.
    assert sessions.current("42") == [(p, ts) for ts, p in [(NOON - 5, "/d"), (NOON - 10, "/c")]] + [
        ("/b2", NOON - 20),
        ("/b", NOON - 20),
        ("/a", NOON - 30),
    ]
    assert redis_client.zrange(keys.transitions(day), 0, -1, withscores=True) == steps_before
    assert sessions.page_views(DAY) == views_before
    assert sessions.started(DAY) == 1  # the user's own, not one more
    with override_settings(ACTIVITY_SESSION_MAX_PAGES=3):
        visits(OTHER, (NOON - 25, "/x"), (NOON - 1, "/y"))
        assert signin.continue_visitor(OTHER, "42").session_length == 3
    assert [p for p, _ in sessions.current("42")] == ["/y", "/d", "/c"]  # the oldest dropped


def test_an_expired_visitor_session_does_not_move(at):
    visits(VISITOR, (NOON, "/pricing"))
    at(NOON + conf.settings.SESSION_WINDOW + 1)
    joined = signin.continue_visitor(VISITOR, "42")
    assert joined.pages == 0 and sessions.page("42") is None
    assert signin.linked_user(VISITOR) == "42"  # linked all the same
    # A view older than the window when it arrives joins no visitor session either.
    visits(VISITOR, (NOON, "/pricing"))
    assert signin.visitor_session(VISITOR) == []


def test_the_funnel_goes_on_from_the_visitors_step_through_the_sign_in(at, admin_user, redis_client):
    funnel = define(["/pricing", "/welcome"])
    browser = Client()
    browser.get("/docs")  # the cookie
    at(NOON + 1)
    browser.get("/pricing")  # the visitor enters the funnel
    assert people(funnel) == [1, 0]
    at(NOON + 2)
    sign_in(browser)
    at(NOON + 3)
    browser.get("/welcome")  # the user converts
    assert people(funnel) == [1, 1]
    visitor = funnels.visitor_person(visitor_of(browser))
    assert funnel_store.read_states(get_client(), [visitor], NOON + 3) == {visitor: None}  # moved, not copied
    assert pages_now.top() == [{"path": "/welcome", "people": 1}]  # one person, no longer the visitor too


def test_a_user_and_a_visitor_who_both_entered_are_counted_once_more_at_no_step(at, redis_client):
    funnel = define(["/pricing", "/welcome"])
    ingest.record_events([Event("42", NOON, "/pricing")])
    visits(VISITOR, (NOON + 5, "/pricing"))
    assert people(funnel) == [2, 0]  # two people until the sign-in says they are one
    assert signin.continue_visitor(VISITOR, "42").funnels == "merged"
    ingest.record_events([Event("42", NOON + 10, "/welcome")])
    ingest.record_events([Event("42", NOON + 11, "/pricing"), Event("42", NOON + 12, "/welcome")])
    assert people(funnel) == [2, 1]  # step 2 counted once for the merged person
    person = funnels.user_person("42")
    state = funnel_store.read_states(get_client(), [person], NOON + 12)[person]
    assert funnel_progress.exported(state)["latest_view"] == NOON + 12


def test_the_merge_keeps_the_higher_step_per_period_and_the_latest_chain_per_level_and_day():
    theirs = '{"t":5,"f":{"1":{"p":{"d:20261125":1},"c":[[1,5,"d:20261125","w:2026W48","m:202611"]]}}}'
    ours = (
        '{"t":7,"f":{"1":{"p":{"d:20261125":2},"c":[[1,3,"d:20261125","w:2026W48","m:202611"]]},"2":{"p":{},"c":[]}}}'
    )
    merged = funnel_progress.merge(ours, theirs)
    assert merged is not None and funnel_progress.exported(merged)["latest_view"] == 7
    assert funnel_progress.exported(merged)["progress"][0] == {
        "funnel": 1,
        "counted": {"d:20261125": 2},
        "in_progress": [[1, 5, "d:20261125", "w:2026W48", "m:202611"]],
    }
    assert funnel_progress.merge(None, theirs) == theirs and funnel_progress.merge(ours, None) is None


def test_a_view_of_the_user_between_the_merges_read_and_write_makes_it_merge_again(at, redis_client):
    define(["/pricing", "/welcome"])
    visits(VISITOR, (NOON, "/pricing"))
    client = get_client()
    pipe = client.pipeline(transaction=False)
    merge = funnel_store.queue_read(pipe, funnels.visitor_person(VISITOR), funnels.user_person("42"), NOON + 1)
    pipe.execute()
    ingest.record_events([Event("42", NOON + 1, "/docs")])  # lands between the read and the write
    ingest.record_events([Event("42", NOON + 2, "/pricing")])
    funnel_store.queue_merge(pipe, merge, NOON + 3)
    pipe.execute()
    assert merge.value == "retry"
    assert funnel_store.merge_again(client, merge, NOON + 3) == "merged"
    person = funnels.user_person("42")
    state = funnel_progress.exported(funnel_store.read_states(client, [person], NOON + 3)[person])
    assert state["latest_view"] == NOON + 2 and len(state["progress"][0]["in_progress"]) == 1


def test_a_signed_out_visit_after_the_link_is_not_a_new_visitor(at, admin_user):
    browser = Client()
    browser.get("/pricing")  # the cookie; the browser signs in at once, never counted as a visitor
    sign_in(browser)
    assert browser.post("/admin/logout/").status_code == 200
    browser.get("/pricing")  # signed out, the same cookie
    browser.get("/docs")
    figures = audience.stats()
    assert figures.new_visitors_day == 1  # the user, counted under their user id; the cookie is not new
    other = Client()
    other.get("/pricing")
    other.get("/pricing")
    assert audience.stats().new_visitors_day == 2  # a browser that never signed in is


def test_erase_removes_the_links_and_the_export_shows_them(at, staff_api, redis_client):
    ingest.record_events([Event("42", NOON - 1, "/docs")])  # a user the service knows
    visits(VISITOR, (NOON, "/pricing"))
    signin.continue_visitor(VISITOR, "42")
    at(NOON + 1)
    signin.continue_visitor(OTHER, "42")
    exported = staff_api.get("/api/v1/users/42/activity/export/").json()
    assert exported["visitors"] == [
        {"visitor": VISITOR, "linked_at": NOON, "at": "2026-11-25T12:00:00.000Z"},
        {"visitor": OTHER, "linked_at": NOON + 1, "at": "2026-11-25T12:00:01.000Z"},
    ]
    visits(VISITOR, (NOON + 1, "/docs"))  # the linked browser, signed out again
    assert staff_api.delete("/api/v1/users/42/activity/").status_code == 204
    assert signin.linked("42") == [] and signin.linked_user(VISITOR) is None and signin.linked_user(OTHER) is None
    assert signin.visitor_session(VISITOR) == []
    shard = audience_store.shard_of(bytes.fromhex(VISITOR))
    assert not redis_client.exists(keys.visitor_link(shard, VISITOR), keys.linked_visitors("42"))
    generation = keys.visitor_generation(shard, lifetimes.VISITORS.of(DAY))
    assert not redis_client.hexists(generation, bytes.fromhex(VISITOR))  # its first visit too
    assert staff_api.get("/api/v1/users/42/activity/export/").status_code == 404
    signin.continue_visitor(VISITOR, "42")  # signing in while tombstoned links nothing
    assert signin.linked("42") == [] and signin.linked_user(VISITOR) is None


def test_the_user_deleted_signal_erases_the_links(at, django_capture_on_commit_callbacks, admin_user):
    signin.continue_visitor(VISITOR, str(admin_user.pk))
    with django_capture_on_commit_callbacks(execute=True):
        admin_user.delete()
    assert signin.linked(str(admin_user.pk)) == [] and signin.linked_user(VISITOR) is None


def test_visitor_page_views_cost_one_script_call_per_visitor_in_the_batchs_round_trip(at, redis_client, loaded):
    visitors = [f"{n:032x}" for n in range(1, 4)]
    for visitor in visitors:
        visits(visitor, (NOON - 1, "/warm"))  # first visits written and remembered by this process
    views = [(visitor, NOON + n, f"/p{n}") for n in range(2) for visitor in visitors]
    with CommandDelta(redis_client) as delta, RoundTrips() as sent:
        ingest.record_events(
            [], visitors=[(v, ts) for v, ts, _ in views], visitor_views=views, day_writes=ingest.PROCESS_DAY_WRITES
        )
    assert sent.count == 1
    # One script call per visitor, beside pages now's two for the batch (docs/live.md).
    assert (delta.calls["evalsha"], delta.calls["rpush"], delta.calls["pexpire"]) == (3 + 2, 3, 3)
    # Bounded: the newest ACTIVITY_SESSION_MAX_PAGES, for the window.
    many = [(visitors[0], NOON + 2 + n / 100, f"/q{n}") for n in range(120)]
    ingest.record_events([], visitors=[(v, ts) for v, ts, _ in many], visitor_views=many)
    session = keys.visitor_session(audience_store.shard_of(bytes.fromhex(visitors[0])), visitors[0])
    assert redis_client.llen(session) == conf.settings.SESSION_MAX_PAGES
    assert 0 < redis_client.pttl(session) <= conf.settings.SESSION_WINDOW * 1000
    link = keys.visitor_link(audience_store.shard_of(bytes.fromhex(visitors[0])), visitors[0])
    signin.continue_visitor(visitors[0], "42")
    assert 0 < redis_client.ttl(link) <= keys.VISITOR_LINK_DAYS * 86400
    assert 0 < redis_client.ttl(keys.linked_visitors("42")) <= keys.VISITOR_LINK_DAYS * 86400
    for n in range(signin.MAX_LINKED + 5):
        signin.continue_visitor(f"{n + 100:032x}", "42")
    assert len(signin.linked("42")) == signin.MAX_LINKED


def test_a_sign_in_is_two_round_trips_of_a_fixed_set_of_commands(at, redis_client, loaded):
    define(["/pricing", "/welcome"])
    visits(VISITOR, *[(NOON - 30 + n, f"/p{n}") for n in range(10)], (NOON, "/pricing"))
    with CommandDelta(redis_client) as delta, RoundTrips() as sent:
        assert signin.continue_visitor(VISITOR, "42").funnels == "merged"
    assert sent.count == 2
    # The reads (LRANGE, and an HMGET of each person's live funnel generations), then 5 scripts (the
    # last takes the visitor out of pages now) and the DEL of the visitor's list; inside the scripts,
    # the user's list read and rewritten (LRANGE, DEL).
    live = len(lifetimes.FUNNEL_STATES.live(calendar.day_of(NOON)))
    calls = delta.calls
    assert (calls["evalsha"], calls["lrange"], calls["del"], calls["hmget"], calls["get"]) == (5, 2, 2, 2 * live, 0)
