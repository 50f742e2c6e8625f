"""The API request path: one Redis round trip per request, its own work (token authentication costs
none, and the throttle's count and the caller's own activity go with the process's tracking
batches), no SQL on ingest once the token is known, a deleted or rotated token refused within
the token cache's TTL, and throttled requests refused without Redis."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings
from rest_framework.authtoken.models import Token

from activity import clock
from activity.calendar import day_name, day_of
from activity.events import Event
from activity.services import ingest, last_seen, tracking
from activity.services.tracking import batches, fail_open
from activity.store import keys
from activity.web.api import authentication
from project.redis_server import free_port
from tests.clients import APIClient
from tests.conftest import with_permissions
from tests.last_seen_state import stored
from tests.redis_counts import CommandDelta
from tests.redis_probe import round_trips

pytestmark = pytest.mark.django_db
EVENTS = "/api/v1/events/"


@pytest.fixture
def machine():
    user = with_permissions(get_user_model().objects.create_user("machine", is_staff=True))
    api = APIClient()
    token = Token.objects.create(user=user)
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return user, token, api


def rates(**overrides: str) -> override_settings:
    """The default rates, with ``overrides``'s scopes in their place."""
    return override_settings(ACTIVITY_THROTTLE_RATES=overrides)


def post(api: APIClient, events: list[dict]) -> object:
    return api.post(EVENTS, json.dumps({"events": events}), content_type="application/json")


@pytest.fixture
def batched(monkeypatch):
    """The process's tracking batches as in production, sent only when the test flushes them."""
    monkeypatch.setattr(tracking, "batches", batches)
    monkeypatch.setattr(tracking, "BATCH_MS", 60_000)
    yield batches
    batches.flush()


def test_ingest_is_one_round_trip_and_no_sql_once_the_token_is_known(
    machine, redis_client, batched, django_assert_num_queries
):
    user, _, api = machine
    # Reads the token (and the user) once; loads the scripts into this server.
    assert post(api, [{"user": "warm-up", "path": "/"}]).status_code == 202
    for batch in (1, 100, 1000):
        before = round_trips()
        with django_assert_num_queries(0):
            answer = post(api, [{"user": f"u{n}", "path": f"/p/{n % 7}"} for n in range(batch)])
        assert answer.status_code == 202 and answer.json()["accepted"] == batch
        assert round_trips() - before == 1  # the batch; the throttle count and the caller wait
    assert last_seen.get(str(user.pk)) is None
    before = round_trips()
    batched.flush()
    # The four requests' throttle counts in one round trip, the caller's activity in another.
    assert round_trips() - before == 2
    assert last_seen.get(str(user.pk)) is not None
    assert [redis_client.get(key) for key in redis_client.scan_iter(f"{keys.prefix()}rate:*")] == ["4"]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/users/{me}/last-seen/",
        "/api/v1/online/",
        "/api/v1/stats/",
        "/api/v1/reports/most-active/",
        "/api/v1/users/walker/session/",
    ],
)
def test_reads_are_one_round_trip_the_throttle_and_the_caller_go_with_the_batches(machine, redis_client, batched, path):
    user, _, api = machine
    ingest.record_events([Event("walker", clock.now(), "/a"), Event(str(user.pk), clock.now())])
    url = path.format(me=user.pk)
    assert api.get(url).status_code == 200  # warm-up: the token read, the report built
    batched.flush()
    before = round_trips()
    assert api.get(url).status_code == 200
    assert round_trips() - before == 1  # on a Redis Cluster too: one round trip per node it reaches
    assert batched.waiting() == 2  # the throttle's count and the caller's activity


def test_a_request_that_needs_no_redis_sends_nothing(machine, redis_client, batched):
    api = machine[2]
    assert api.get("/api/v1/reports/").status_code == 200
    before = round_trips()
    assert api.get("/api/v1/reports/").status_code == 200
    assert round_trips() == before


def test_the_callers_activity_is_recorded_once_not_again_by_the_middleware(machine, redis_client):
    user, _, api = machine
    with CommandDelta(redis_client) as delta:
        assert api.get("/api/v1/reports/").status_code == 200
    # The throttle's count (INCRBY); a token's caller is a machine: its last seen (a script), its
    # group index entry (HMGET) and the day's machine count; nothing twice (the middleware adds nothing).
    assert (delta.calls["incrby"], delta.calls["evalsha"], delta.calls["hmget"], delta.calls["hincrby"]) == (1, 1, 1, 1)
    browser = APIClient()
    browser.force_login(user)  # a person, signed in by session
    browser.get("/api/v1/reports/")
    with CommandDelta(redis_client) as delta:
        assert browser.get("/api/v1/reports/").status_code == 200
    # The throttle's count, last seen and group index entry (the warm-up request wrote today's first
    # visit and active-user bit; this process remembers it: ingest.PROCESS_DAY_WRITES).
    assert (delta.calls["incrby"], delta.calls["evalsha"], delta.calls["hmget"]) == (1, 1, 1)


def test_a_busy_callers_requests_in_one_batch_cost_one_last_seen_write(machine, redis_client, batched):
    user, _, api = machine
    for _ in range(20):
        assert api.get("/api/v1/reports/").status_code == 200
    with CommandDelta(redis_client) as delta:
        batched.flush()
    # One script moving the caller's last seen and one HMGET reading its group index entry, for 20
    # requests; the machine requests and the throttle's counts are each still counted in full.
    assert (delta.calls["evalsha"], delta.calls["hmget"]) == (1, 1) and last_seen.get(str(user.pk)) is not None
    assert redis_client.hget(keys.traffic(day_name(day_of(clock.now()))), "machine") == "20"
    assert [redis_client.get(key) for key in redis_client.scan_iter(f"{keys.prefix()}rate:*")] == ["20"]


def test_a_callers_activity_redis_refused_is_dropped_and_the_answer_stands(machine, redis_client):
    user, _, api = machine
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):  # nothing answers there
        # The list needs no Redis: the answer stands, its throttle count and caller activity are lost
        # (a cluster client cannot even be made without a node: 503, the same loss).
        assert api.get("/api/v1/reports/").status_code in (200, 503)
    assert last_seen.get(str(user.pk)) is None
    fail_open.reset()  # the pause after a failure ends
    assert api.get("/api/v1/reports/").status_code == 200
    assert last_seen.get(str(user.pk)) is not None


def test_a_request_refused_before_redis_records_no_caller_activity(machine, redis_client):
    user, _, api = machine
    assert post(api, [{"user": "bad id!"}]).status_code == 400
    assert last_seen.get(str(user.pk)) is None
    assert stored(redis_client) == {}


def test_a_deleted_token_works_at_most_its_cache_ttl_in_another_process(machine, redis_client, monkeypatch):
    _, token, api = machine
    now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: now)
    assert post(api, [{"user": "a"}]).status_code == 202
    # Deleted by another process: no signal reaches this one, so its cached copy serves until the TTL.
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {Token._meta.db_table} WHERE key = %s", [token.key])
    assert post(api, [{"user": "a"}]).status_code == 202
    monkeypatch.setattr(clock, "now", lambda: now + authentication.TOKEN_CACHE_TTL + 0.001)
    assert post(api, [{"user": "a"}]).status_code == 401


def test_a_rotated_token_stops_at_once_in_the_process_that_rotated_it(machine, redis_client):
    user, token, api = machine
    assert post(api, [{"user": "a"}]).status_code == 202
    token.delete()  # rotation: the old key goes, a new one comes
    fresh = Token.objects.create(user=user)
    assert post(api, [{"user": "a"}]).status_code == 401
    api.credentials(HTTP_AUTHORIZATION=f"Token {fresh.key}")
    assert post(api, [{"user": "a"}]).status_code == 202


def test_throttled_requests_cost_no_round_trip_and_write_nothing(machine, redis_client, mid_minute):
    api = machine[2]
    with rates(ingest="3/min"):
        codes = [post(api, [{"user": f"u{n}"}]).status_code for n in range(3)]
        before = round_trips()
        refused = post(api, [{"user": "late"}])
        assert round_trips() == before
    assert codes == [202, 202, 202] and refused.status_code == 429
    assert 0 < float(refused["Retry-After"]) <= 30
    assert last_seen.get("late") is None


def test_throttle_count_of_a_request_that_sends_nothing_still_goes_in_one_round_trip(machine, redis_client):
    api = machine[2]
    before = round_trips()
    assert post(api, [{"user": "bad id!"}]).status_code == 400
    assert round_trips() - before == 1
    assert [redis_client.get(key) for key in redis_client.scan_iter(f"{settings.ACTIVITY_KEY_PREFIX}rate:*")] == ["1"]


def test_metrics_need_the_view_permission_and_count_what_happened(machine, member_api, redis_client):
    api = machine[2]
    post(api, [{"user": "a"}, {"user": "b"}])
    post(api, [{"user": "a"}, {"user": "bad id!"}])
    assert member_api.get("/metrics").status_code == 403
    answer = api.get("/metrics")
    assert answer.status_code == 200 and answer["Content-Type"].startswith("text/plain")
    text = answer.content.decode()
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert float(samples["activity_events_accepted_total"]) >= 2
    assert float(samples["activity_events_rejected_total"]) >= 2
    assert float(samples["activity_redis_round_trips_total"]) > 0
    assert float(samples["activity_flush_backlog"]) >= 3  # a, b and the caller wait for the flush
