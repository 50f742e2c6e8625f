"""The production server's settings (``project/gunicorn.conf.py``): the collector's freezes (a
worker's boot, then its first requests), new connections spread across the workers, and that
gunicorn takes the file as it is."""

from __future__ import annotations

import collections
import gc
import http.client
import importlib.util
import os
import socket
import subprocess
import sys
import time
import weakref
from pathlib import Path
from types import ModuleType

import pytest

from project.redis_server import free_port

CONF = Path(__file__).resolve().parent.parent / "project" / "gunicorn.conf.py"
WORKERS = 4
BURST = 128  # new connections opened at once: 32 a worker on an even spread


def load_conf(monkeypatch: pytest.MonkeyPatch, freeze_after: str) -> ModuleType:
    """A fresh copy of the settings module, as a new worker has it."""
    monkeypatch.setenv("WEB_GC_FREEZE_AFTER", freeze_after)
    spec = importlib.util.spec_from_file_location("gunicorn_conf_under_test", CONF)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def thawed():
    """The test process's collector as it was: nothing frozen before, nothing left frozen after."""
    assert gc.get_freeze_count() == 0
    yield
    gc.unfreeze()


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


def test_a_worker_collects_then_freezes_at_boot_and_again_at_its_nth_request(monkeypatch, thawed):
    conf = load_conf(monkeypatch, "5")
    at_boot, built_before_boot = cyclic_garbage(), Node()
    conf.post_worker_init(None)
    assert at_boot() is None  # collected before the freeze, not frozen with the survivors
    assert not walked(built_before_boot)
    built_by_requests = Node()  # what the first requests build and keep
    for _ in range(4):
        conf.post_request(None, None, None, None)
    assert walked(built_by_requests)  # nothing more frozen before the 5th request
    in_requests = cyclic_garbage()
    conf.post_request(None, None, None, None)
    assert not walked(built_by_requests)
    assert in_requests() is None
    later = Node()
    for _ in range(50):
        conf.post_request(None, None, None, None)
    assert walked(later)  # and only once


def test_freeze_after_zero_leaves_the_collector_alone(monkeypatch, thawed):
    conf = load_conf(monkeypatch, "0")
    kept = Node()
    conf.post_worker_init(None)
    for _ in range(300):
        conf.post_request(None, None, None, None)
    assert gc.get_freeze_count() == 0 and walked(kept)


def test_gunicorn_takes_the_settings_file():
    found = subprocess.run(
        [sys.executable, "-m", "gunicorn", "--check-config", "-c", str(CONF)],
        cwd=CONF.parent.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert found.returncode == 0, found.stdout + found.stderr


def served_by(port: int, connections: int) -> collections.Counter[int]:
    """Open ``connections`` connections at once (all connected before the first request), then ask
    one request on each: how many each worker process answered."""
    opened = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(connections)]
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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_REUSEPORT spreads connections on Linux only")
def test_a_burst_of_new_connections_is_spread_across_the_workers():
    """A burst of connections (a load balancer's pool opening) lands on every worker, none of them
    with less than half its even share: each worker listens on a socket of its own (SO_REUSEPORT),
    so the kernel spreads them, not whichever worker happens to wake first."""
    port = free_port()
    env = {**os.environ, "PORT": str(port), "HOST": "127.0.0.1", "WEB_CONCURRENCY": str(WORKERS)}
    env.pop("WEB_REUSE_PORT", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(CONF), "tests.worker_pid_app:application"],
        cwd=CONF.parent.parent,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        booted, deadline = 0, time.monotonic() + 30
        while booted < WORKERS and time.monotonic() < deadline:
            booted += "Booting worker" in server.stderr.readline()
        assert booted == WORKERS
        time.sleep(1)  # each binds its socket right after it says so, and the app imports nothing
        counts = served_by(port, BURST)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert len(counts) == WORKERS and min(counts.values()) >= BURST // WORKERS // 2, counts
