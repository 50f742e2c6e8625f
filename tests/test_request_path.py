"""The API request path: one Redis round trip per request, everything included (token
authentication, throttle, the caller's own activity, the work), no SQL on ingest once the token is
known, a deleted or rotated token refused within ACTIVITY_TOKEN_CACHE_TTL, throttled requests
refused without Redis, and the fast JSON parser reading exactly what the strict one reads."""

from __future__ import annotations

import json

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import override_settings
from hypothesis import given
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import ParseError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.request import Request
from rest_framework.test import APIClient, APIRequestFactory

from activity import clock, conf, metrics
from activity.calendar import day_name, day_of
from activity.events import Event
from activity.services import ingest, last_seen
from activity.store import keys
from activity.web.api.negotiation import ContentNegotiation
from activity.web.api.parsers import EventJSONParser, _object_without_duplicate_keys
from activity.web.api.renderers import FastJSONRenderer, PrometheusRenderer
from project.redis_server import free_port
from tests.redis_counts import CommandDelta
from tests.test_events_property import REPEATABLE, json_values

pytestmark = pytest.mark.django_db
EVENTS = "/api/v1/events/"


def round_trips() -> float:
    return metrics.REDIS_ROUND_TRIPS._value.get()


@pytest.fixture
def machine():
    user = get_user_model().objects.create_user("machine", is_staff=True)
    api = APIClient()
    token = Token.objects.create(user=user)
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return user, token, api


def rates(**overrides: str) -> override_settings:
    framework = {**settings.REST_FRAMEWORK}
    framework["DEFAULT_THROTTLE_RATES"] = {**framework["DEFAULT_THROTTLE_RATES"], **overrides}
    return override_settings(REST_FRAMEWORK=framework)


def post(api: APIClient, events: list[dict]) -> object:
    return api.post(EVENTS, json.dumps({"events": events}), content_type="application/json")


def test_ingest_is_one_round_trip_and_no_sql_once_the_token_is_known(machine, redis_client, django_assert_num_queries):
    user, _, api = machine
    # Reads the token (and the user) once; loads the scripts into this server.
    assert post(api, [{"user": "warm-up", "path": "/"}]).status_code == 202
    for batch in (1, 100, 1000):
        before = round_trips()
        with django_assert_num_queries(0):
            answer = post(api, [{"user": f"u{n}", "path": f"/p/{n % 7}"} for n in range(batch)])
        assert answer.status_code == 202 and answer.json()["accepted"] == batch
        assert round_trips() - before == 1  # throttle count + caller's activity + the batch
    # The caller's own activity travelled in that round trip: its last seen moved.
    assert last_seen.get(str(user.pk)) is not None


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/users/{me}/last-seen/",
        "/api/v1/online/",
        "/api/v1/stats/",
        "/api/v1/reports/",
        "/api/v1/reports/most-active/",
        "/api/v1/users/walker/session/",
    ],
)
def test_reads_are_one_round_trip_with_the_throttle_and_the_callers_activity(machine, redis_client, path):
    user, _, api = machine
    ingest.record_events([Event("walker", clock.now(), "/a"), Event(str(user.pk), clock.now())])
    url = path.format(me=user.pk)
    assert api.get(url).status_code == 200  # warm-up: the token read, the report built
    with CommandDelta(redis_client) as delta:
        before = round_trips()
        assert api.get(url).status_code == 200
        trips = round_trips() - before
    assert trips == 1  # on a Redis Cluster too: one round trip per node it reaches, sent together
    assert delta.calls["evalsha"] >= 1  # the throttle's count (and the caller's last seen) went too


def test_the_callers_activity_is_recorded_once_not_again_by_the_middleware(machine, redis_client):
    user, _, api = machine
    with CommandDelta(redis_client) as delta:
        assert api.get("/api/v1/reports/").status_code == 200
    # A token's caller is a machine: the throttle's count, its last seen and group index (one
    # script each) and the day's machine count; nothing twice (the middleware adds nothing).
    assert delta.calls["evalsha"] == 3 and delta.calls["incr"] + delta.calls["hincrby"] >= 1
    browser = APIClient()
    browser.force_login(user)  # a person, signed in by session
    browser.get("/api/v1/reports/")
    with override_settings(ACTIVITY_CALLER_SEEN_EVERY=0), CommandDelta(redis_client) as delta:
        assert browser.get("/api/v1/reports/").status_code == 200
    # The throttle's count, last seen and group index (the warm-up request wrote today's first visit
    # and active-user bit; this process remembers it: ACTIVITY_DAY_WRITES_CACHE).
    assert delta.calls["evalsha"] == 3


def test_a_busy_callers_last_seen_moves_once_per_caller_seen_every(machine, redis_client, monkeypatch):
    user, _, api = machine
    start = clock.now()
    every = conf.settings.CALLER_SEEN_EVERY
    traffic = keys.traffic(day_name(day_of(start)))
    sent = []
    for offset in (0, every / 2, every * 0.99, every, every * 1.5):
        monkeypatch.setattr(clock, "now", lambda offset=offset: start + offset)
        with CommandDelta(redis_client) as delta:
            assert api.get("/api/v1/reports/").status_code == 200
        sent.append(delta.calls["evalsha"])
        # Moved by the first request of each ACTIVITY_CALLER_SEEN_EVERY, never back.
        moved_at = 0 if offset < every else every
        assert last_seen.get(str(user.pk)).ts == pytest.approx(start + moved_at, abs=0.001)
    # The throttle's count every time; last seen and group index (two scripts) once per interval.
    assert sent == [3, 1, 1, 3, 1]
    # Machine requests are still counted one by one.
    assert redis_client.hget(traffic, "machine") == "5"


def test_a_callers_last_seen_lost_with_its_round_trip_is_sent_again(machine, redis_client):
    api = machine[2]
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):  # nothing answers there
        # The list needs no Redis: the answer stands, its throttle count and caller activity are lost
        # (a cluster client cannot even be made without a node: 503, the same loss).
        assert api.get("/api/v1/reports/").status_code in (200, 503)
    with CommandDelta(redis_client) as delta:
        assert api.get("/api/v1/reports/").status_code == 200
    assert delta.calls["evalsha"] == 3  # not remembered as moved: sent again


def test_a_request_refused_before_redis_records_no_caller_activity(machine, redis_client):
    user, _, api = machine
    assert post(api, [{"user": "bad id!"}]).status_code == 400
    assert last_seen.get(str(user.pk)) is None
    assert redis_client.zcard(f"{settings.ACTIVITY_KEY_PREFIX}{{ls}}:seen") == 0


def test_a_deleted_token_works_at_most_its_cache_ttl_in_another_process(machine, redis_client, monkeypatch):
    _, token, api = machine
    now = clock.now()
    monkeypatch.setattr(clock, "now", lambda: now)
    assert post(api, [{"user": "a"}]).status_code == 202
    # Deleted by another process: no signal reaches this one, so its cached copy serves until the TTL.
    Token.objects.filter(pk=token.pk)._raw_delete(Token.objects.db)
    assert post(api, [{"user": "a"}]).status_code == 202
    monkeypatch.setattr(clock, "now", lambda: now + conf.settings.TOKEN_CACHE_TTL + 0.001)
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


def test_metrics_are_staff_only_and_count_what_happened(machine, member_api, redis_client):
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


def strict(body: bytes) -> object:
    """What the parser answered before orjson: the stdlib, duplicate keys refused."""
    return json.loads(body.decode(), object_pairs_hook=_object_without_duplicate_keys)


def parsed(body: bytes) -> object:
    import io

    return EventJSONParser().parse(io.BytesIO(body), "application/json", {})


@REPEATABLE
@given(
    value=json_values,
    spacing=st.sampled_from([(",", ":"), (", ", ": "), (",", " : "), ("\n,", ":\t")]),
    ascii=st.booleans(),
    duplicate=st.booleans(),
)
def test_the_fast_parser_reads_exactly_what_the_strict_one_reads(value, spacing, ascii, duplicate):
    body = json.dumps({"events": value}, separators=spacing, ensure_ascii=ascii)
    if duplicate:  # the same key again, somewhere orjson would silently keep the last of
        body = body.replace('{"events"', '{"events"' + spacing[1] + "0" + spacing[0] + '"events"', 1)
    raw = body.encode("utf-8", "surrogatepass")
    try:
        expected = strict(raw)
    except (ValueError, RecursionError):
        with pytest.raises(ParseError):
            parsed(raw)
        return
    assert json.dumps(parsed(raw), sort_keys=True) == json.dumps(expected, sort_keys=True)


ACCEPTS = [None, "*/*", "application/json", "application/json; indent=4", "text/html", "application/*", ""]
ACCEPTS += ["text/plain", "text/plain, */*;q=0.1", "text/html;q=0.5, application/json", "nonsense"]
RENDERERS = [
    [FastJSONRenderer],
    [PrometheusRenderer],
    [FastJSONRenderer, BrowsableAPIRenderer],
    [PrometheusRenderer, FastJSONRenderer],
]


def negotiated(negotiation, accept: str | None, renderers: list, query: str, suffix: str | None) -> tuple:
    headers = {} if accept is None else {"HTTP_ACCEPT": accept}
    request = Request(APIRequestFactory().get(f"/x/{query}", **headers))
    try:
        renderer, media_type = negotiation.select_renderer(request, [r() for r in renderers], suffix)
    except Exception as error:
        return (type(error),)
    return (type(renderer), media_type)


@pytest.mark.parametrize("renderers", RENDERERS)
@pytest.mark.parametrize("query, suffix", [("", None), ("?format=json", None), ("?format=", None), ("", "api")])
def test_the_fast_negotiation_answers_as_drfs_own(renderers, query, suffix):
    for accept in ACCEPTS:
        expected = negotiated(DefaultContentNegotiation(), accept, renderers, query, suffix)
        assert negotiated(ContentNegotiation(), accept, renderers, query, suffix) == expected, accept
