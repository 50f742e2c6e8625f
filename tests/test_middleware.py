"""The tracking middleware: one round trip per tracked request, none otherwise, fails open."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from activity.middleware import fail_open
from activity.store import keys
from project.redis_server import free_port
from tests.redis_counts import CommandDelta

pytestmark = [pytest.mark.urls("tests.pages"), pytest.mark.django_db]


@pytest.fixture
def browser(member) -> Client:
    client = Client()
    client.force_login(member)
    return client


def _round_trips(redis_client, send) -> dict:
    """Commands the request sent on its own connection (scripts' inner commands excluded)."""
    with CommandDelta(redis_client) as delta:
        send()
    return {name: calls for name, calls in delta.calls.items() if name in {"evalsha", "eval", "multi", "exec"}}


def test_tracked_page_costs_one_round_trip(browser, member, redis_client):
    browser.get("/pricing")  # warm: connection open, script loaded
    calls = _round_trips(redis_client, lambda: browser.get("/pricing"))
    assert sum(calls.values()) == 1, calls
    assert redis_client.zscore(keys.last_seen(), str(member.pk)) is not None


@pytest.mark.parametrize("path", ["/static/app.css", "/healthz"])
def test_excluded_paths_cost_nothing(browser, redis_client, path):
    with CommandDelta(redis_client) as delta:
        browser.get(path)
    delta.calls.pop("ping", None)  # /healthz pings Redis itself
    assert delta.calls == {}
    assert redis_client.exists(keys.last_seen()) == 0


def test_anonymous_costs_nothing(redis_client, db):
    with CommandDelta(redis_client) as delta:
        assert Client().get("/pricing").status_code == 200
    assert delta.calls == {}


def test_error_responses_are_not_tracked(browser, redis_client):
    assert browser.get("/no-such-page").status_code == 404
    assert redis_client.exists(keys.last_seen()) == 0


def test_redis_down_page_still_served_and_tracking_backs_off(browser):
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with override_settings(REDIS_URL=dead, ACTIVITY_FAIL_OPEN_BACKOFF=60):
        responses = [browser.get("/pricing") for _ in range(20)]
    assert {r.status_code for r in responses} == {200}
    # Only the first request tried Redis; the other 19 skipped it during the back-off.
    assert (fail_open.failures, fail_open.skipped) == (1, 19)
