"""A real Celery worker rides out its broker failing over, refusing writes or restarting: it stays up
and takes tasks again once the broker serves (``CELERY_BROKER_CHANNEL_ERROR_RETRY``,
``CELERY_BROKER_CONNECTION_MAX_RETRIES`` in project/settings.py). Without them an error reply
(READONLY, MISCONF, UNBLOCKED) ended the worker, and ``make run`` with it.

The broker is a throwaway server of this file's own (the worker's results go there too); the
service's Redis is the run's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery
from django.conf import settings

from project.redis_server import PrivateRedis
from tests.celery_procs import Proc, worker

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]

STATE_SECONDS = 3  # how long each state lasts: several of the worker's reconnection attempts


@pytest.fixture(scope="module")
def broker() -> Iterator[PrivateRedis]:
    server = PrivateRedis(args=["--enable-protected-configs", "yes"]).start()  # MISCONF moves its dir
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def other() -> Iterator[PrivateRedis]:
    """What the broker replicates while it is a replica."""
    with PrivateRedis() as server:
        yield server


@pytest.fixture
def broker_worker(broker: PrivateRedis, tmp_path: Path) -> Iterator[Proc]:
    with worker("broker", tmp_path, CELERY_BROKER_URL=broker.url, CELERY_RESULT_BACKEND=broker.url) as proc:
        yield proc


def run_task(broker: PrivateRedis, timeout: float) -> dict:
    """The sweep job sent through ``broker`` to the worker's queue, and its result."""
    with pytest.MonkeyPatch.context() as patch:
        # Celery prefers these variables to the URLs it is given: on a cluster run they name the run's broker.
        patch.delenv("CELERY_BROKER_URL", raising=False)
        patch.delenv("CELERY_RESULT_BACKEND", raising=False)
        client = Celery(broker=broker.url, backend=broker.url, set_as_current=False)  # tasks keep the project app
        try:
            sent = client.send_task("activity.sweep", queue=settings.CELERY_TASK_DEFAULT_QUEUE)
            return sent.get(timeout=timeout)
        finally:
            client.close()


def fail_over(raw: redis.Redis, other: PrivateRedis) -> None:
    """The broker becomes a replica (a failover seen from the old primary: blocked reads end with
    UNBLOCKED, writes answer READONLY), then a primary again."""
    raw.replicaof("127.0.0.1", other.port)
    time.sleep(STATE_SECONDS)
    raw.replicaof("NO", "ONE")


def refuse_writes(raw: redis.Redis, other: PrivateRedis) -> None:
    """A snapshot fails (its directory is /proc) with stop-writes-on-bgsave-error on: MISCONF."""
    folder = raw.config_get("dir")["dir"]
    raw.config_set("save", "3600 1")
    raw.config_set("dir", "/proc")
    raw.bgsave()
    time.sleep(STATE_SECONDS)
    with pytest.raises(redis.ResponseError, match="MISCONF"):
        raw.lpush("acttest-broker-probe", "x")
    raw.config_set("dir", folder)
    raw.config_set("save", "")
    raw.bgsave()


def restart(raw: redis.Redis, other: PrivateRedis) -> None:
    """The broker goes away (connections refused) and comes back empty."""
    raw.shutdown(nosave=True)
    time.sleep(STATE_SECONDS)
    raise Restart


class Restart(Exception):
    """``restart`` stopped the server: the test starts it again (it has the PrivateRedis)."""


@pytest.mark.parametrize("state", [fail_over, refuse_writes, restart], ids=lambda state: state.__name__)
def test_the_worker_rides_out_the_broker(state, broker, other, broker_worker, redis_client):
    assert run_task(broker, timeout=60)["job"] == "sweep"  # up and consuming
    raw = redis.Redis.from_url(broker.url)
    try:
        state(raw, other)
    except Restart:
        broker.start()
    assert broker_worker.process.poll() is None, broker_worker.log.read_text()[-3000:]
    assert run_task(broker, timeout=60)["job"] == "sweep", broker_worker.log.read_text()[-3000:]
    assert broker_worker.process.poll() is None
