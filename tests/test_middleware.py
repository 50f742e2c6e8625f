"""The tracking middleware: one round trip per tracked request, none otherwise, fails open."""

from __future__ import annotations

import pytest
from django.test import override_settings

from activity import calendar, clock
from activity.services import ingest, tracking
from activity.services.tracking import fail_open
from activity.store import keys
from project.redis_server import free_port
from tests.clients import Client
from tests.last_seen_state import stored
from tests.redis_counts import CommandDelta
from tests.redis_probe import probe

pytestmark = [pytest.mark.urls("tests.pages"), pytest.mark.django_db]


@pytest.fixture
def member_client(member) -> Client:
    client = Client()
    client.force_login(member)
    return client


def test_excluded_paths_cost_nothing(member_client, redis_client):
    with CommandDelta(redis_client) as delta:
        member_client.get("/static/app.css")
    assert delta.calls == {}


def test_healthz_is_not_tracked(member_client, redis_client):
    with CommandDelta(redis_client) as delta:
        member_client.get("/healthz")
    assert delta.calls["evalsha"] == 0  # it reads Redis (ping, flush status) but records nothing
    assert stored(redis_client) == {}


@pytest.mark.urls("tests.host_site")
def test_the_apps_probes_are_not_tracked_under_a_prefix_either(member_client, redis_client):
    with CommandDelta(redis_client) as delta:
        member_client.get("/activity/healthz")
        member_client.get("/activity/metrics")
    assert delta.calls["evalsha"] == 0
    assert stored(redis_client) == {}
    member_client.get("/docs/")  # a page of the site's own is tracked
    assert stored(redis_client) != {}


def test_anonymous_without_consent_costs_nothing(redis_client, db):
    with override_settings(ACTIVITY_VISITOR_COOKIES=False), CommandDelta(redis_client) as delta:
        assert Client().get("/pricing").status_code == 200
    assert delta.calls == {}


def test_anonymous_visit_is_one_round_trip_and_never_a_user(redis_client, db):
    other = Client()
    for _ in range(2):
        other.get("/pricing")  # another visitor: loads the scripts
    visitor = Client()
    visitor.get("/pricing")  # gets the cookie; nothing is recorded until it comes back
    with probe(redis_client) as seen:
        visitor.get("/pricing")  # the first recorded visit
    assert (seen.client_sends, seen.server_reads) == (1, 1)
    # The same visitor again that day: already recorded, and this process remembers it (for
    # ingest.DAY_WRITES_CACHE seconds), so only the page view goes, into the visitor's session (one
    # script call, for a sign-in to move: docs/visitors.md#signing-in); a request that is no page
    # view sends nothing at all.
    with probe(redis_client) as again:
        visitor.get("/pricing")
    assert (again.client_sends, again.server_reads) == (1, 1)
    with probe(redis_client) as no_page:
        visitor.head("/pricing")
    assert (no_page.client_sends, no_page.server_reads) == (0, 0)
    assert stored(redis_client) == {}


def test_a_visit_already_written_today_is_written_again_once_the_process_forgets_it(redis_client, db, monkeypatch):
    now = clock.now()
    unique_today = keys.unique_visitors(calendar.name_of("day", calendar.day_of(now)))
    visitor = Client()
    visitor.get("/pricing")
    visitor.get("/pricing")
    assert redis_client.delete(unique_today) == 1  # lost (a restart without persistence)
    monkeypatch.setattr(clock, "now", lambda: now + ingest.DAY_WRITES_CACHE + 1)
    with probe(redis_client) as seen:
        visitor.get("/pricing")
    assert seen.client_sends == 1 and redis_client.exists(unique_today)
    with probe(redis_client) as uncached:  # a process that remembers nothing writes each visit
        for _ in range(2):
            ingest.PROCESS_DAY_WRITES.clear()
            visitor.get("/pricing")
    assert uncached.client_sends == 2


def test_error_responses_are_not_tracked(member_client, redis_client):
    assert member_client.get("/no-such-page").status_code == 404
    assert stored(redis_client) == {}


def test_redis_down_page_still_served_and_tracking_backs_off(member_client, monkeypatch):
    dead = f"redis://127.0.0.1:{free_port()}/0"
    monkeypatch.setattr(tracking, "FAIL_OPEN_BACKOFF", 60)
    with override_settings(REDIS_URL=dead):
        responses = [member_client.get("/pricing") for _ in range(20)]
    assert {r.status_code for r in responses} == {200}
    # Only the first request tried Redis; the other 19 skipped it during the back-off.
    assert (fail_open.failures, fail_open.skipped) == (1, 19)
