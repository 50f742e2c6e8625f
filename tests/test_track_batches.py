"""The middleware's batches: many tracked requests, one round trip; bounded; nothing lost on a normal
exit; Redis away fails open. (The rest of the suite sends request by request: conftest.)"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from prometheus_client import REGISTRY
from rest_framework.authtoken.models import Token

from activity import clock
from activity.calendar import day_name, day_of
from activity.services import audience, last_seen, sessions, tracking, traffic
from activity.services.tracking import batches, fail_open
from activity.store import keys
from project.redis_server import free_port
from tests.clients import APIClient, Client
from tests.conftest import with_permissions
from tests.last_seen_state import stored
from tests.redis_counts import CommandDelta
from tests.redis_probe import round_trips
from tests.test_commands import subprocess_env

pytestmark = [pytest.mark.urls("tests.pages"), pytest.mark.django_db]


def hold(monkeypatch, batch_ms: int = 60_000, size: int = 1000) -> None:
    """Production's batches, whose thread waits a minute before sending on its own, so what a test
    sees waiting is what its requests left, until it flushes."""
    monkeypatch.setattr(tracking, "batches", batches)
    monkeypatch.setattr(tracking, "BATCH_MS", batch_ms)
    monkeypatch.setattr(tracking, "BATCH_SIZE", size)


@pytest.fixture(autouse=True)
def _nothing_left_waiting():
    batches.flush()
    yield
    batches.flush()


def browsers(count: int) -> list[tuple[str, Client]]:
    found = []
    for n in range(count):
        user = get_user_model().objects.create_user(f"reader{n}")
        client = Client()
        client.force_login(user)
        found.append((str(user.pk), client))
    return found


def eventually(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_many_tracked_pages_are_one_round_trip_and_nothing_is_sent_before(redis_client, monkeypatch):
    readers = browsers(31)
    hold(monkeypatch)
    readers.pop()[1].get("/pricing")
    batches.flush()  # loads the scripts (a NOSCRIPT is re-run on its own: not this test's count)
    before = round_trips()
    for _, client in readers:
        assert client.get("/pricing").status_code == 200
    assert round_trips() == before  # the requests only handed their activity over
    assert batches.waiting() == 30
    batches.flush()
    assert round_trips() == before + 1
    seen = [stored(redis_client).get(user) for user, _ in readers]
    assert None not in seen
    assert all(redis_client.llen(keys.session(user)) == 1 for user, _ in readers)
    assert sessions.page_views(audience.stats().day) == 31  # the warm-up's and the thirty


def test_late_requests_in_a_batch_never_move_last_seen_back(redis_client, monkeypatch):
    ((user, client),) = browsers(1)
    now = clock.now()
    hold(monkeypatch)
    for offset in (5.0, 1.0, 9.0, 3.0):  # the batch holds them out of order
        monkeypatch.setattr(clock, "now", lambda offset=offset: now + offset)
        client.get("/pricing")
    batches.flush()
    assert stored(redis_client).get(user) == pytest.approx(now + 9.0, abs=0.001)
    assert redis_client.llen(keys.session(user)) == 4


def test_the_thread_sends_after_the_batch_time_or_at_the_batch_size(redis_client, monkeypatch):
    (first, early), (second, full) = browsers(2)
    hold(monkeypatch, batch_ms=20)
    early.get("/pricing")
    assert eventually(lambda: stored(redis_client).get(first) is not None)
    hold(monkeypatch, size=3)
    for _ in range(3):
        full.get("/pricing")
    assert eventually(lambda: redis_client.llen(keys.session(second)) == 3)


def test_bots_in_a_batch_are_counted_one_per_request(redis_client, monkeypatch):
    crawler = Client(headers={"User-Agent": "curl/8.5.0"})
    hold(monkeypatch)
    for _ in range(7):
        crawler.get("/pricing")
    batches.flush()
    assert audience.stats().bots_day == 7


def test_an_api_callers_activity_joins_the_batches_once_its_request_succeeded(redis_client, monkeypatch):
    """The request's own round trip carries only its work; the throttle's counts, the caller's last
    seen and machine-traffic count wait in the batches, and a refused request's activity never joins."""
    user = with_permissions(get_user_model().objects.create_user("machine", is_staff=True))
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    day = keys.traffic(day_name(day_of(clock.now())))
    paths = ("/api/v1/users/never-seen/last-seen/", "/api/v1/users/s1/session/", "/api/v1/reports/")
    hold(monkeypatch)
    assert [api.get(path).status_code for path in paths] == [404, 404, 200]  # loads the scripts
    batches.flush()
    with CommandDelta(redis_client) as delta:
        before = round_trips()
        assert [api.get(path).status_code for path in paths] == [404, 404, 200]
        assert round_trips() == before + 2  # the list of reports needs no Redis
    # The last-seen read and the session read's script: nothing of the caller's or the throttle's.
    assert delta.calls["evalsha"] == 1 and not delta.calls["hincrby"] and not delta.calls["incrby"]
    assert batches.waiting() == 4  # three throttle counts; the 404s' callers are not recorded
    batches.flush()
    assert last_seen.get(str(user.pk)) is not None
    assert redis_client.hget(day, "machine") == "2"  # the warm-up's and this round's that succeeded


def dropped_so_far() -> float:
    """Tracked requests dropped so far (``activity_track_dropped``)."""
    return REGISTRY.get_sample_value("activity_track_dropped_total")


def test_a_full_buffer_drops_the_oldest_and_counts_them(redis_client, monkeypatch):
    readers = browsers(8)
    dropped = dropped_so_far()
    hold(monkeypatch)
    monkeypatch.setattr(tracking, "BUFFER_MAX", 5)
    for _, client in readers:
        client.get("/pricing")
    assert batches.waiting() == 5
    batches.flush()
    assert dropped_so_far() == dropped + 3
    seen = [stored(redis_client).get(user) for user, _ in readers]
    assert [score is not None for score in seen] == [False] * 3 + [True] * 5


def test_redis_away_drops_what_waits_once_and_pauses_tracking_pages_still_served(redis_client, monkeypatch):
    readers = browsers(5)
    dropped = dropped_so_far()
    dead = f"redis://127.0.0.1:{free_port()}/0"
    hold(monkeypatch)
    monkeypatch.setattr(tracking, "FAIL_OPEN_BACKOFF", 60)
    with override_settings(REDIS_URL=dead):
        assert [client.get("/pricing").status_code for _, client in readers[:4]] == [200] * 4
        monkeypatch.setattr(tracking, "BATCH_SIZE", 2)
        batches.flush()  # the first batch of 2 fails: logged, counted, the 2 behind it dropped too
        assert dropped_so_far() == dropped + 4
        assert [client.get("/pricing").status_code for _, client in readers] == [200] * 5
        assert batches.waiting() == 0  # paused: these handed nothing over
    assert (fail_open.failures, fail_open.skipped) == (1, 5)  # one try, not one per batch
    assert [stored(redis_client).get(user) for user, _ in readers] == [None] * 5


def test_a_process_exiting_normally_sends_what_waits(redis_client, monkeypatch):
    script = """
import django, time
django.setup()
from activity.events import Event
from activity.services import tracking
from activity.services.tracking import Activity, batches
tracking.BATCH_MS = 60_000  # the thread would wait a minute: only the exit sends it
batches.add(Activity("person", event=Event("leaving", time.time(), "/bye"), name="leaving"))
assert batches.waiting() == 1
"""
    env = subprocess_env()
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    assert stored(redis_client).get("leaving") is not None
    assert redis_client.llen(keys.session("leaving")) == 1


def test_what_arrives_during_a_send_waits_its_batch_time_instead_of_going_out_at_once(redis_client, monkeypatch):
    """A steady stream of entries and a slow Redis (each send 20 ms): one send per batch time, not a
    stream of small batches made of what arrived during the previous send. Nothing is lost."""
    sizes: list[int] = []
    send = tracking.send

    def slow_send(entries: list[tracking.Activity]) -> None:
        time.sleep(0.02)
        send(entries)
        sizes.append(len(entries))

    monkeypatch.setattr(tracking, "send", slow_send)
    stream = tracking.Batches()
    hold(monkeypatch, batch_ms=100)
    started = time.monotonic()
    added = 0
    while time.monotonic() - started < 1.0:
        stream.add(tracking.Activity(traffic.BOT))
        added += 1
        time.sleep(0.002)
    assert eventually(lambda: stream.waiting() == 0 and sum(sizes) == added)
    assert len(sizes) <= 14  # about one a batch time over the second; sending on at once made ~50
    assert audience.stats().bots_day == added
