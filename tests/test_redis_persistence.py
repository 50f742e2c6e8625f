"""``make run``'s private Redis persists: a stop and a start on the same data directory keep every
key the service wrote, a SIGKILL keeps what the AOF (``everysec``) had, and a second server never
runs on one data directory. Real redis-server processes on loopback, a few seconds in all."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from django.test import override_settings

from activity import clock, conf
from activity.events import Event
from activity.services import ingest, last_seen
from project.redis_server import DataDirInUse, PrivateRedis, free_port


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "redis"


READ = {
    b"string": lambda raw, key: raw.get(key),
    b"hash": lambda raw, key: raw.hgetall(key),
    b"set": lambda raw, key: raw.smembers(key),
    b"zset": lambda raw, key: raw.zrange(key, 0, -1, withscores=True),
    b"list": lambda raw, key: raw.lrange(key, 0, -1),
}


def snapshot(url: str, prefix: str) -> dict[str, tuple[object, bool]]:
    """Every key under ``prefix``: its value, read by its type (a set's DUMP is in no fixed order),
    and whether it has a TTL."""
    with redis.Redis.from_url(url) as raw:
        keys = list(raw.scan_iter(match=f"{prefix}*"))
        return {key.decode(): (READ[raw.type(key)](raw, key), raw.pttl(key) > 0) for key in keys}


@pytest.fixture
def on_server() -> Iterator[Callable[[PrivateRedis], None]]:
    """Point the store at a given server for the rest of the test (a standalone one, cluster run or not)."""
    overrides: list[override_settings] = []

    def point(server: PrivateRedis) -> None:
        overrides.append(override_settings(REDIS_URL=server.url, ACTIVITY_REDIS_CLUSTER=False))
        overrides[-1].enable()

    yield point
    for override in reversed(overrides):
        override.disable()


def test_a_stop_and_start_on_the_same_dir_keeps_every_key(data_dir, on_server):
    server = PrivateRedis(data_dir=data_dir).start()
    try:
        on_server(server)
        now = clock.now()
        events = [Event(f"u{n}", now - n, f"/page/{n % 3}") for n in range(50)]
        ingest.record_events(events, visitors=[(f"{n:032x}", now) for n in range(5)])
        before = snapshot(server.url, conf.settings.KEY_PREFIX)
        assert len(before) > 10  # last seen, its dirty queue, sessions, bitmaps, first visits, counters
    finally:
        server.stop()  # SIGTERM: Redis shuts down as on SHUTDOWN
    assert not server.pidfile.exists()
    assert {path.name for path in data_dir.iterdir()} >= {"dump.rdb", "appendonlydir"}

    again = PrivateRedis(data_dir=data_dir).start()  # another port, the same directory
    try:
        on_server(again)
        after = snapshot(again.url, conf.settings.KEY_PREFIX)
        assert after.keys() == before.keys()
        assert after == before
        assert last_seen.get("u0").ts == pytest.approx(now)  # through the service, scripts reloaded
    finally:
        again.stop()


def test_a_sigkill_keeps_what_the_aof_had_written(data_dir):
    server = PrivateRedis(data_dir=data_dir).start()
    raw = redis.Redis.from_url(server.url)
    try:
        raw.set("old", "1")
        raw.hset("first-visits", mapping={f"v{n}": 1 for n in range(100)})
        time.sleep(1.5)  # everysec: fsynced by now
        raw.set("recent", "1")
        assert raw.info("persistence")["rdb_changes_since_last_save"] > 0  # no snapshot has them
    finally:
        raw.close()
        server.kill()
        server.stop()  # its owner lets go of the directory; the server is gone already
    assert server.pidfile.exists()  # left behind: stale now, and the next start removes it

    again = PrivateRedis(data_dir=data_dir).start()
    try:
        with redis.Redis.from_url(again.url) as raw:
            assert raw.get("old") == b"1" and raw.hlen("first-visits") == 100
            # "recent" is there too as a rule: Redis write()s the AOF before it replies, so a SIGKILL
            # of redis-server alone leaves the kernel every acknowledged write. Not asserted: while a
            # slow fsync runs, Redis holds its writes back for up to 2 s and still replies.
            assert raw.dbsize() in (2, 3)
    finally:
        again.stop()


def test_one_server_per_data_dir(data_dir):
    first = PrivateRedis(data_dir=data_dir).start()
    try:
        with pytest.raises(DataDirInUse, match="another PrivateRedis"):
            PrivateRedis(data_dir=data_dir).start()
    finally:
        first.stop()

    # A server whose owner died without stopping it (a SIGKILLed make run): its pid file keeps a
    # new one out, with what to do.
    orphan = subprocess.Popen(
        [
            first.binary,
            "--port",
            str(free_port()),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data_dir),
            "--pidfile",
            str(first.pidfile),
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not first.pidfile.exists() and orphan.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(DataDirInUse, match=f"pid {orphan.pid} still runs"):
            PrivateRedis(data_dir=data_dir).start()
    finally:
        orphan.kill()
        orphan.wait(timeout=10)
    assert first.pidfile.exists()  # SIGKILLed: the pid file stays, stale
    PrivateRedis(data_dir=data_dir).start().stop()  # a stale pid file is removed, not obeyed
