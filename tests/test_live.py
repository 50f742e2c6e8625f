"""The live stream (docs/live.md): one feed per process reading Redis once a second for every
stream, each stream's events, heartbeats and end, what a client's going away leaves behind, and the
stream under the production server."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import os
import signal
import socket
import time
import urllib.request
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission
from django.test import Client as DjangoClient
from rest_framework.authtoken.models import Token
from rest_framework.request import Request

from activity import permissions
from activity.events import Event
from activity.services import ingest
from activity.web.api import live
from activity.web.api.authentication import STANDING_TTL, TOKEN_CACHE_TTL, still_allowed
from project.serving import WORKERS_KILL_TIMEOUT
from tests.clients import APIClient
from tests.redis_counts import command_calls
from tests.served import Site, served_site

VIEW = permissions.VIEW_ACTIVITY
STREAM_HEADERS = {"HTTP_ACCEPT": "text/event-stream"}


def collect(stream, seconds: float) -> list[tuple[float, bytes]]:
    """What ``stream`` yields within ``seconds``, each with when (from the start), then closed."""

    async def run() -> list[tuple[float, bytes]]:
        started, got = time.monotonic(), []

        async def take() -> None:
            async for chunk in stream:
                got.append((time.monotonic() - started, chunk))

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(take(), seconds)
        return got

    return asyncio.run(run())


class Figures:
    """A feed's ``read``: the figures move on each call while ``moving``, and calls are counted."""

    def __init__(self, moving: bool = True) -> None:
        self.calls, self.moving = 0, moving

    def __call__(self) -> dict[str, int]:
        self.calls += 1
        return {"online": self.calls if self.moving else 1}


async def allowed() -> bool:
    return True


def test_a_stream_sends_at_once_then_each_change_at_most_once_an_interval(monkeypatch):
    figures = Figures()
    feed = live.Feed(figures, interval=0.2)
    got = collect(live.events(allowed, feed), 1.1)
    events = [json.loads(chunk.split(b"data: ")[1]) for _, chunk in got]
    assert got[0][0] < 0.5 and events[0] == {"online": 1}  # at once: the first read
    assert 3 <= len(events) <= 6 and [e["online"] for e in events] == sorted({e["online"] for e in events})
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(got)]
    assert min(gaps) >= 0.19  # never more than one an interval
    assert all(chunk.startswith(b"event: stats\ndata: ") and chunk.endswith(b"\n\n") for _, chunk in got)


def test_no_change_sends_nothing_but_heartbeats(monkeypatch):
    monkeypatch.setattr(live, "HEARTBEAT_S", 0.3)
    got = collect(live.events(allowed, live.Feed(Figures(moving=False), interval=0.05)), 1.0)
    chunks = [chunk for _, chunk in got]
    assert chunks[0].startswith(b"event: stats") and chunks[1:] == [live.KEEP_ALIVE] * 3


def test_many_streams_share_one_reader_which_stops_with_the_last(monkeypatch):
    figures = Figures()
    feed = live.Feed(figures, interval=0.1)

    async def run() -> None:
        streams = [live.events(allowed, feed) for _ in range(200)]
        firsts = await asyncio.gather(*(anext(stream) for stream in streams))
        assert len(set(firsts)) == 1 and feed.listeners == 200 and feed.polling
        await asyncio.sleep(0.5)
        for stream in streams:
            await stream.aclose()  # the server's cancel of a gone client
        assert feed.listeners == 0
        await asyncio.sleep(0.3)
        assert not feed.polling

    asyncio.run(run())
    assert figures.calls <= 10  # one reader for 200 streams, not 200


def test_a_stream_ends_once_its_caller_may_not_read_it(monkeypatch):
    monkeypatch.setattr(live, "RECHECK_S", 0.3)
    answers = iter([True, False])

    async def until_revoked() -> bool:
        return next(answers)

    got = collect(live.events(until_revoked, live.Feed(Figures(moving=False), interval=0.05)), 2.0)
    assert len(got) == 1 and got[0][1].startswith(b"event: stats")  # then ended at the second check


@pytest.mark.django_db(transaction=True)  # the check reads the database on a thread of its own
def test_a_revoked_token_or_an_ended_session_or_a_lost_permission_ends_it(staff, at):
    """The database is asked at most once per caller and ``STANDING_TTL``, shared by every stream
    of the caller; a change is seen once that has passed, within the token cache's period."""
    now = time.time()
    at(now)
    token = Token.objects.create(user=staff)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    request = _drf_request(api.get("/api/v1/stats/").wsgi_request, token, staff)
    check, other_stream = (still_allowed(request, permissions.VIEW_ACTIVITY) for _ in range(2))
    check, other_stream, on_the_loop = _sync(check), _sync(other_stream), _sync(other_stream, NoThreads())
    assert check()
    token.delete()
    assert on_the_loop()  # the caller's standing, read once for both: no thread asked, nor the database
    assert check()  # until the standing read a moment ago expires
    at(now + STANDING_TTL)
    assert not check() and not other_stream()
    assert STANDING_TTL + live.RECHECK_S <= TOKEN_CACHE_TTL

    browser = DjangoClient()
    browser.force_login(staff)
    check = _sync(still_allowed(_drf_request(browser.get("/api/v1/stats/").wsgi_request, None, staff), VIEW))
    assert check()
    staff.user_permissions.remove(Permission.objects.get(codename="view_activity"))
    at(now + 2 * STANDING_TTL)
    assert not check()  # read afresh: the permission is gone
    staff.user_permissions.add(Permission.objects.get(codename="view_activity"))
    at(now + 3 * STANDING_TTL)
    assert check()
    browser.logout()
    at(now + 4 * STANDING_TTL)
    assert not check()


class NoThreads(concurrent.futures.ThreadPoolExecutor):
    """An event loop's executor that refuses work: a check that asks it for a thread fails."""

    def submit(self, fn, /, *args, **kwargs):
        raise AssertionError("the check left the event loop")


def _sync(check, executor=None):
    """``check`` called from a test: on an event loop of its own, as the stream calls it."""

    async def run() -> bool:
        if executor is not None:
            asyncio.get_running_loop().set_default_executor(executor)
        return await check()

    return lambda: asyncio.run(run())


def _drf_request(request, auth, user):
    drf = Request(request)
    drf.user, drf.auth = user, auth
    return drf


@pytest.mark.django_db
def test_a_wsgi_server_refuses_the_stream_and_json_gets_the_figures(redis_client, staff, member):
    api = APIClient()
    api.force_authenticate(staff)
    ingest.record_events([Event("7", time.time(), "/pricing")])
    refused = api.get("/api/v1/live/", **STREAM_HEADERS)
    assert refused.status_code == 406 and "ASGI" in refused.json()["detail"]
    once = api.get("/api/v1/live/")
    assert once.status_code == 200
    body = once.json()
    assert body["online"] == 1 and body["page_views"] == {"day": 1}
    assert body["pages_now"] == [{"path": "/pricing", "people": 1}]
    api.force_authenticate(member)
    assert api.get("/api/v1/live/", **STREAM_HEADERS).status_code == 403
    assert APIClient().get("/api/v1/live/", **STREAM_HEADERS).status_code == 401


# --- under the production server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[Site]:
    with served_site(tmp_path_factory.mktemp("live")) as found:
        yield found


def stream_request(site: Site) -> bytes:
    return (
        f"GET /api/v1/live/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token {site.token}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()


def open_stream(site: Site) -> tuple[socket.socket, bytes]:
    """A stream's socket once its first event came, and what came."""
    sock = socket.create_connection(("127.0.0.1", site.port), timeout=10)
    sock.sendall(stream_request(site))
    seen = b""
    while b"\n\n" not in seen.split(b"event: stats", 1)[-1] or b"event: stats" not in seen:
        seen += sock.recv(65536)
    return sock, seen


def post(site: Site, events: list[dict]) -> None:
    body = json.dumps({"events": events}).encode()
    headers = {"Authorization": f"Token {site.token}", "Content-Type": "application/json"}
    urllib.request.urlopen(urllib.request.Request(site.base + "/api/v1/events/", body, headers), timeout=10).close()


def metric(site: Site, name: str) -> float:
    request = urllib.request.Request(site.base + "/metrics", headers={"Authorization": f"Token {site.token}"})
    with urllib.request.urlopen(request, timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def figures(chunk: bytes) -> dict:
    return json.loads(chunk.split(b"data: ", 1)[1].split(b"\n", 1)[0])


def test_a_served_stream_carries_a_change_within_a_second(redis_client, site):
    sock, first = open_stream(site)
    try:
        before = figures(first[first.index(b"event: stats") :])
        posted = time.monotonic()
        post(site, [{"user": "live-1", "path": "/pricing"}])
        seen = b""
        while b"/pricing" not in seen:
            seen += sock.recv(65536)
        waited = time.monotonic() - posted
        after = figures(seen[seen.rindex(b"event: stats") :])
    finally:
        sock.close()
    assert waited < 2, waited  # one poll interval, and the time a read takes (on a loaded machine)
    assert after["online"] >= before["online"] + 1  # the new user (and the caller, once its own activity is in)
    assert {"path": "/pricing", "people": 1} in after["pages_now"]


def test_open_streams_hold_no_thread_each(redis_client, site):
    """Django would run each stream's middleware and view on a thread of the stream's own and keep
    it while the stream lasts; under the front they share one: 50 open streams, a few threads more
    (the feed's reader) at most."""
    before = site.worker_threads()
    socks = [open_stream(site)[0] for _ in range(50)]
    try:
        during = site.worker_threads()
    finally:
        for sock in socks:
            sock.close()
    assert during - before < 10, (before, during)


def test_a_thousand_dropped_streams_leave_nothing_behind(redis_client, site):
    """1,000 streams opened (100 at a time) and dropped once their first event came: the process
    counts as many ended as opened, and its Redis connections are what they were."""
    opened, closed = (
        metric(site, "activity_live_streams_opened_total"),
        metric(site, "activity_live_streams_closed_total"),
    )
    connections = redis_client.info("clients")["connected_clients"]
    for _ in range(10):
        socks = [open_stream(site)[0] for _ in range(100)]
        for sock in socks:
            sock.close()
    deadline = time.monotonic() + 10
    while metric(site, "activity_live_streams_closed_total") - closed < 1000 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert metric(site, "activity_live_streams_opened_total") - opened == 1000
    assert metric(site, "activity_live_streams_closed_total") - closed == 1000
    assert redis_client.info("clients")["connected_clients"] <= connections + 2


def test_one_reader_serves_every_stream_of_the_process(redis_client, site):
    """50 streams for 3 s: the feed's reads (pages now's prune script, one a read) stay a few a
    second, not one per stream."""
    socks = [open_stream(site)[0] for _ in range(50)]
    try:
        before = command_calls(redis_client)["evalsha"]
        time.sleep(3)
        reads = command_calls(redis_client)["evalsha"] - before
    finally:
        for sock in socks:
            sock.close()
    assert reads <= 6, reads


def test_a_server_told_to_stop_with_a_stream_open_stops(tmp_path):
    """granian waits for a stopping worker's open connections, and a live stream never ends on its
    own: the worker is killed after its kill timeout, so the stream's client sees its connection
    close (to reconnect to the server that replaces it), and the server exits (``served_site``
    waits for it, 30 s at most)."""
    with served_site(tmp_path) as site:
        sock, _ = open_stream(site)
        os.kill(site.server_pid, signal.SIGTERM)
        sock.settimeout(WORKERS_KILL_TIMEOUT + 10)
        with sock:
            while sock.recv(65536):  # a heartbeat or a change, until the connection closes
                pass
