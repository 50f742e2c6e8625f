"""The production server (``project/serving.py`` starting granian, ``project/asgi.py`` in front of
Django): Django runs on one thread of its own once a body is whole, keeping its database
connection; slow clients cannot starve it, its limits answer as documented, new connections spread
across the workers, and the collector's freezes (a worker's boot, then its first requests)."""

from __future__ import annotations

import asyncio
import collections
import gc
import http.client
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections
from django.db.backends.signals import connection_created
from django.http import StreamingHttpResponse

from activity.web.api.live import ASYNC_STREAMING
from bench.slow_clients import HOST, serve, siege
from project.asgi import GENERATIONAL, Front, Message, OneThread, django_application, wsgi_environ
from project.redis_server import free_port
from project.serving import granian_command

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 4
BURST = 128  # new connections opened at once: 32 a worker on an even spread
HEADER_TIMEOUT, BODY_TIMEOUT = 2, 3  # seconds: the defaults (10, 30) shortened for the suite


@pytest.fixture
def thawed():
    """The test process's collector with nothing frozen, before and after (on Python 3.12 something
    the suite imports has frozen a few hundred objects by then), and its thresholds as they were."""
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


class Node:
    """A reference cycle's member (weakly referable, so a test can see it freed)."""

    partner: Node | None = None


def cyclic_garbage() -> weakref.ref[Node]:
    """A reference cycle nothing else holds, which only the collector frees; a weak reference to it."""
    garbage, other = Node(), Node()
    garbage.partner, other.partner = other, garbage
    return weakref.ref(garbage)


def walked(thing: object) -> bool:
    """Whether the collector still walks ``thing`` (frozen objects are in none of its generations)."""
    return any(found is thing for found in gc.get_objects())


async def answer_ok(scope: dict, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def boot(front: Front) -> None:
    """The ASGI lifespan's start-up, as the server runs it once a worker has loaded the app."""
    messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])

    async def receive() -> Message:
        return next(messages)

    async def send(message: Message) -> None:
        pass

    asyncio.run(front({"type": "lifespan"}, receive, send))


def serve_one(front: Front) -> None:
    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        pass

    asyncio.run(front({"type": "http", "method": "GET", "headers": []}, receive, send))


def test_a_worker_collects_then_freezes_at_boot_and_again_at_its_nth_request(thawed):
    front = Front(answer_ok, None, freeze_after=5)
    at_boot, built_before_boot = cyclic_garbage(), Node()
    boot(front)
    assert at_boot() is None  # collected before the freeze, not frozen with the survivors
    assert not walked(built_before_boot)
    built_by_requests = Node()  # what the first requests build and keep
    for _ in range(4):
        serve_one(front)
    assert walked(built_by_requests)  # nothing more frozen before the 5th request
    in_requests = cyclic_garbage()
    serve_one(front)
    assert not walked(built_by_requests)
    assert in_requests() is None
    later = Node()
    for _ in range(50):
        serve_one(front)
    assert walked(later)  # and only once


def scope(headers: list[tuple[bytes, bytes]]) -> dict:
    """An ASGI HTTP scope as granian gives one."""
    return {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "path": "/p",
        "query_string": b"q=1",
        "root_path": "",
        "scheme": "http",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


class Chunks(list):
    """A WSGI answer that records its ``close()`` (Django's request_finished)."""

    closed = False

    def close(self) -> None:
        self.closed = True


def test_django_runs_on_one_thread_of_its_own_once_the_body_is_whole():
    """Every request runs on the same thread, not the event loop's, once per request, after the
    body's last message, reading all of it; its answer goes out in one body message, and it is
    closed."""
    answer = Chunks([b"an ", b"answer"])
    calls: list[tuple[int, bytes, int]] = []
    pending: list[bytes] = []

    def wsgi(environ: dict, start_response) -> Chunks:
        calls.append((threading.get_ident(), environ["wsgi.input"].read(), len(pending)))
        start_response("201 Created", [("X-Thing", "1"), ("Content-Type", "text/plain")])
        return answer

    async def receive() -> Message:
        return {"type": "http.request", "body": pending.pop(0), "more_body": bool(pending)}  # popped first

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def serve_two() -> int:
        app = OneThread(wsgi)
        for _ in range(2):
            pending.extend([b"one ", b"two ", b"three"])
            await asyncio.get_running_loop().create_task(app(scope([]), receive, send))
        return threading.get_ident()

    loop_thread = asyncio.run(serve_two())
    assert [body for _, body, _ in calls] == [b"one two three"] * 2 and [left for *_, left in calls] == [0, 0]
    django_threads = {thread for thread, *_ in calls}
    assert len(django_threads) == 1 and loop_thread not in django_threads
    start = {
        "type": "http.response.start",
        "status": 201,
        "headers": [(b"x-thing", b"1"), (b"content-type", b"text/plain")],
    }
    assert sent == [start, {"type": "http.response.body", "body": b"an answer"}] * 2
    assert answer.closed


class Streamed(StreamingHttpResponse):
    """An asynchronous answer that records the thread its ``close()`` ran on."""

    closed_on: int | None = None

    def close(self) -> None:
        self.closed_on = threading.get_ident()
        super().close()


def stream_through_one_thread(chunks, disconnect_after: bytes | None) -> tuple[list[Message], Streamed, int]:
    """Serve an answer streaming ``chunks`` through ``OneThread``; the client disconnects once
    ``disconnect_after`` was sent (None: never). The messages sent, the answer, the loop's thread."""
    answer = Streamed(chunks, content_type="text/event-stream")
    environs: list[dict] = []

    def wsgi(environ: dict, start_response) -> Streamed:
        environs.append(environ)
        start_response("200 OK", list(answer.items()))
        return answer

    async def serve() -> tuple[list[Message], int]:
        gone = asyncio.Event()
        bodies = [{"type": "http.request", "body": b"", "more_body": False}]
        sent: list[Message] = []

        async def receive() -> Message:
            if bodies:
                return bodies.pop()
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            assert answer.closed_on is not None  # Django's part of the request ended before the stream
            sent.append(message)
            if message.get("body") == disconnect_after:
                gone.set()

        await asyncio.wait_for(OneThread(wsgi)({**scope([]), "method": "GET"}, receive, send), 10)
        return sent, threading.get_ident()

    sent, loop_thread = asyncio.run(serve())
    assert environs[0][ASYNC_STREAMING] is True
    return sent, answer, loop_thread


def test_an_asynchronous_answer_is_sent_from_the_loop_as_it_comes_django_done_first():
    """The live stream's way: the answer comes back from Django's thread closed there (its closers,
    request_finished), and the event loop sends each chunk as a message of its own, then an empty
    last one."""

    async def chunks():
        yield b"one"
        yield b"two"

    sent, answer, loop_thread = stream_through_one_thread(chunks(), disconnect_after=None)
    assert answer.closed_on not in (None, loop_thread)
    assert sent[0]["status"] == 200
    assert sent[1:] == [
        {"type": "http.response.body", "body": b"one", "more_body": True},
        {"type": "http.response.body", "body": b"two", "more_body": True},
        {"type": "http.response.body", "body": b""},
    ]


def test_a_client_that_goes_away_ends_its_stream_at_once():
    """A stream waiting for a chunk that never comes is closed as its client disconnects: its
    generator's ``finally`` runs (the live stream's listener count goes down there), and nothing
    more is sent."""
    finished: list[bool] = []

    async def chunks():
        try:
            yield b"one"
            await asyncio.Event().wait()  # no second chunk, ever
            yield b"never"
        finally:
            finished.append(True)

    sent, _, _ = stream_through_one_thread(chunks(), disconnect_after=b"one")
    assert finished == [True]
    assert sent[1:] == [{"type": "http.response.body", "body": b"one", "more_body": True}]


@pytest.mark.django_db(transaction=True)
def test_the_requests_of_a_worker_share_one_database_connection():
    """As the requests of a WSGI thread do: each request runs in a task of its own, as granian runs
    it, yet Django opens one database connection for all of them (``CONN_MAX_AGE``), not one each."""
    opened: list[object] = []

    def count(sender: object, connection: object, **kwargs: object) -> None:
        opened.append(connection)

    async def five_requests() -> list[int]:
        front = Front(OneThread(django_application), None)
        statuses: list[int] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Message) -> None:
            statuses.extend([message["status"]] if "status" in message else [])

        request = {**scope([(b"host", b"localhost")]), "method": "GET", "path": "/healthz"}
        for _ in range(5):
            await asyncio.get_running_loop().create_task(front(request, receive, send))
        front.app.thread.submit(connections.close_all).result()
        return statuses

    connection_created.connect(count)
    try:
        statuses = asyncio.run(five_requests())
    finally:
        connection_created.disconnect(count)
    assert statuses == [200] * 5 and len(opened) == 1


def test_a_worker_imports_the_urlconf_as_it_loads_not_in_its_first_request():
    """The imports of the views (seconds on a loaded machine) are over before a worker serves."""
    loaded = "import sys, project.asgi; from django.conf import settings; print(settings.ROOT_URLCONF in sys.modules)"
    found = subprocess.run([sys.executable, "-c", loaded], cwd=ROOT, capture_output=True, text=True, check=True)
    assert found.stdout.split() == ["True"]


def test_a_header_named_with_an_underscore_never_reaches_django():
    """``X_Forwarded_For`` would pass for ``X-Forwarded-For`` in the environ: it is dropped."""
    headers = [(b"x_forwarded_for", b"6.6.6.6"), (b"content-type", b"text/plain"), (b"x-thing", b"1")]
    environ = wsgi_environ(scope(headers), io.BytesIO())
    assert "HTTP_X_FORWARDED_FOR" not in environ
    assert (environ["CONTENT_TYPE"], environ["HTTP_X_THING"], environ["QUERY_STRING"]) == ("text/plain", "1", "q=1")
    with_it = wsgi_environ(scope([(b"x-forwarded-for", b"1.2.3.4"), *headers]), io.BytesIO())
    assert with_it["HTTP_X_FORWARDED_FOR"] == "1.2.3.4"


def young_collections(count: int) -> None:
    """Allocate until the collector has run ``count`` young collections of its own accord."""
    done: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 0:
            done.append(1)

    # Containers, each counted towards the young generation's threshold (700 on 3.12, 2,000 on 3.13).
    more_than_a_threshold = 2 * gc.get_threshold()[0]
    gc.callbacks.append(note)
    try:
        while len(done) < count:
            [[] for _ in range(more_than_a_threshold)]
    finally:
        gc.callbacks.remove(note)


@pytest.mark.skipif(not GENERATIONAL, reason="CPython 3.14's incremental collector has no middle generation")
def test_what_outlives_dozens_of_young_collections_stays_out_of_the_old_generation(thawed):
    """A live stream's wait for the next read lives about a second: a hundred young collections or more
    under load. It dies in the middle generation rather than reaching the old one, whose full
    collections walk every open stream's objects."""
    boot(Front(answer_ok, None, freeze_after=5))
    waiting = Node()
    young_collections(50)
    assert walked(waiting)
    assert not any(found is waiting for found in gc.get_objects(generation=2))


def test_freeze_after_zero_leaves_the_collector_alone(thawed):
    front = Front(answer_ok, None, freeze_after=0)
    thresholds, kept = gc.get_threshold(), Node()
    boot(front)
    for _ in range(300):
        serve_one(front)
    assert gc.get_freeze_count() == 0 and walked(kept)
    assert gc.get_threshold() == thresholds


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[int]:
    """The example project under granian as ``make run`` starts it (timeouts shortened): its port."""
    port = free_port()
    timeouts = {"WEB_HEADER_TIMEOUT": str(HEADER_TIMEOUT), "WEB_BODY_TIMEOUT": str(BODY_TIMEOUT)}
    # Django's guard against database calls beside a running event loop on, whatever this process has.
    guarded = {"DJANGO_ALLOW_ASYNC_UNSAFE": ""}
    server = serve(
        tmp_path_factory.mktemp("served"),
        os.environ["REDIS_URL"],
        port,
        {"WEB_CONCURRENCY": "2", **timeouts, **guarded},
    )
    try:
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_served_service_reaches_its_database_with_djangos_async_guard_on(served):
    """Django runs on no thread with a running event loop, where its guard would refuse database
    calls: /healthz reads the database."""
    connection = http.client.HTTPConnection(HOST, served, timeout=10)
    connection.request("GET", "/healthz")
    answer = connection.getresponse()
    assert (answer.status, json.loads(answer.read())) == (200, {"redis": "ok", "database": "ok"})


def test_slow_clients_hold_sockets_not_the_service(served):
    """64 sockets trickling headers and 64 holding half-sent bodies, each replaced when closed: fresh
    requests answer within 1 s throughout, and the server closes every slow socket at its timeout
    (the body with a 408)."""
    found = siege(served, seconds=2 * BODY_TIMEOUT + 1)
    assert len(found.probes) >= 30 and None not in found.probes
    assert found.p99_ms() < 1000, found.probes
    headers, bodies = found.closed_after("headers"), found.closed_after("body")
    late = 2.5  # seconds past its timeout a close may be read on a loaded machine
    assert len(headers) >= 2 * 64 and min(headers) >= HEADER_TIMEOUT and max(headers) < HEADER_TIMEOUT + late
    assert len(bodies) >= 64 and min(bodies) >= BODY_TIMEOUT and max(bodies) < BODY_TIMEOUT + late
    assert found.overdue("headers", HEADER_TIMEOUT + late) == found.overdue("body", BODY_TIMEOUT + late) == 0
    assert found.statuses("body") == {408}


def test_a_body_over_the_cap_is_refused_before_it_is_read(served):
    connection = http.client.HTTPConnection(HOST, served, timeout=10)
    connection.putrequest("POST", "/api/v1/events/")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1))
    connection.endheaders()  # no body sent: the answer comes from the declared length
    answer = connection.getresponse()
    assert answer.status == 413
    assert b"exceeds" in answer.read()


def test_a_url_over_64_kb_answers_414(served):
    connection = http.client.HTTPConnection(HOST, served, timeout=10)
    connection.request("GET", "/api/v1/online/?x=" + "a" * 65_535)
    assert connection.getresponse().status == 414


def test_too_many_headers_answer_431(served):
    connection = http.client.HTTPConnection(HOST, served, timeout=10)
    connection.putrequest("GET", "/healthz")
    for n in range(120):
        connection.putheader(f"X-Header-{n}", "x")
    connection.endheaders()
    assert connection.getresponse().status == 431


def served_by(port: int, connections: int) -> collections.Counter[int]:
    """Open ``connections`` connections at once (all connected before the first request), then ask
    one request on each: how many each worker process answered."""
    opened = [socket.create_connection((HOST, port), timeout=10) for _ in range(connections)]
    counts: collections.Counter[int] = collections.Counter()
    try:
        for connection in opened:
            connection.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        for connection in opened:
            answer = http.client.HTTPResponse(connection)
            answer.begin()
            counts[int(answer.read())] += 1
    finally:
        for connection in opened:
            connection.close()
    return counts


def test_a_burst_of_new_connections_is_spread_across_the_workers():
    """A burst of connections (a load balancer's pool opening) lands on every worker, none of them
    with less than half its even share."""
    port = free_port()
    env = {**os.environ, "PORT": str(port), "HOST": HOST, "WEB_CONCURRENCY": str(WORKERS)}
    server = subprocess.Popen(
        granian_command(sys.executable, env, "tests.worker_pid_app:application"),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        started, deadline = 0, time.monotonic() + 30
        while started < WORKERS and time.monotonic() < deadline:
            started += "Started worker" in server.stdout.readline()
        assert started == WORKERS
        time.sleep(1)  # a worker says it started a moment before it accepts connections
        counts = served_by(port, BURST)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert len(counts) == WORKERS and min(counts.values()) >= BURST // WORKERS // 2, counts
