"""Real Celery workers (and beat) flushing to the test database: kills lose nothing, nothing goes back.

The workers (tests/celery_procs.py) are subprocesses on this run's private Redis and queue, on the
test database; they are killed with SIGKILL (the whole process group: main process and pool child).
"""

from __future__ import annotations

import itertools
import json
import random
import socket
import time
from contextlib import ExitStack

import pytest
import redis
from django.conf import settings

from activity import tasks
from activity.events import Event
from activity.models import UserActivity
from activity.services import ingest
from activity.store import keys
from project.celery import app
from tests.celery_procs import BATCH, LOCK_TTL, Proc, beat, wait_for, worker
from tests.last_seen_state import stored

pytestmark = [pytest.mark.celery, pytest.mark.django_db(transaction=True)]


def record(users: int, updates: int, rng: random.Random, base: float, everyone: bool = False) -> None:
    """``updates`` last-seen events, out of order, through the service (``everyone``: each user once first)."""
    ids = [str(i) for i in range(users)] if everyone else []
    ids += [str(rng.randrange(users)) for _ in range(updates - len(ids))]
    for start in range(0, updates, 1000):
        ingest.record_events([Event(user=user, ts=base + rng.uniform(0, 3600)) for user in ids[start : start + 1000]])


def db_snapshot() -> dict[str, float]:
    return {user: ts.timestamp() for user, ts in UserActivity.objects.values_list("user_id", "last_seen")}


def assert_not_back(before: dict[str, float], after: dict[str, float]) -> None:
    went_back = [user for user, ts in before.items() if after.get(user, -1) < ts]
    assert not went_back, f"{len(went_back)} users went back in the database, e.g. {went_back[:5]}"


def drain(redis_client, timeout: float = 40.0) -> None:
    """Send flush runs until nothing waits (stale claims are reaped once older than the lock TTL)."""
    deadline = time.monotonic() + timeout
    while len(stored(redis_client, "dirty")) + len(stored(redis_client, "claimed")):
        assert time.monotonic() < deadline, "the backlog did not drain"
        tasks.flush.delay().get(timeout=30)
        time.sleep(0.3)


def assert_db_equals_redis(redis_client, users: int) -> None:
    scores = stored(redis_client)
    assert len(scores) == users
    db = db_snapshot()
    mismatched = [user for user, ts in scores.items() if abs(db.get(user, -1) - ts) > 1e-6]
    assert not mismatched, f"{len(mismatched)} users differ, e.g. {[(u, scores[u], db.get(u)) for u in mismatched[:3]]}"


def wait_lock_free(redis_client) -> None:
    wait_for(lambda: not redis_client.exists(keys.lock("job:flush")), LOCK_TTL + 5, "the dead run's lock to expire")


def assert_history(redis_client, snapshots: list[dict], users: int) -> None:
    """The database never went back from one snapshot to the next, and ends equal to Redis."""
    for before, after in itertools.pairwise(snapshots):
        assert_not_back(before, after)
    assert_db_equals_redis(redis_client, users)


def kill_paused(redis_client, proc: Proc, batch: int, rng, base: float, users: int) -> None:
    """Wait for the run to pause after its claim, change some users under it, then SIGKILL the worker."""
    wait_for(lambda: f"test pause after claiming batch {batch}" in proc.log.read_text(), 30, "the pause")
    record(users, 10_000, rng, base + 1800)  # lands on claimed members too: they go back to dirty
    proc.kill()
    assert len(stored(redis_client, "claimed")) >= BATCH  # its claim was never acknowledged
    assert redis_client.pttl(keys.lock("job:flush")) > 0  # killed holding its lock


def test_sigkill_at_three_points_loses_nothing(redis_client, tmp_path):
    users, rng, base = 20_000, random.Random(5), time.time() - 7200
    record(users, 60_000, rng, base, everyone=True)
    snapshots = [db_snapshot()]
    with ExitStack() as stack:
        # 1: killed right after its first claim, before any database write.
        first = stack.enter_context(worker("first", tmp_path, ACTIVITY_TEST_PAUSE_AFTER_CLAIM="1"))
        tasks.flush.delay()
        kill_paused(redis_client, first, 1, rng, base, users)
        assert UserActivity.objects.count() == 0
        snapshots.append(db_snapshot())

        # 2: killed after two committed batches, holding its third claim (and the first run's claim).
        second = stack.enter_context(worker("second", tmp_path, ACTIVITY_TEST_PAUSE_AFTER_CLAIM="3"))
        wait_lock_free(redis_client)
        tasks.flush.delay()
        kill_paused(redis_client, second, 3, rng, base, users)
        assert UserActivity.objects.count() == 2 * BATCH
        snapshots.append(db_snapshot())

        # 3: no pause; killed wherever it is once it has made progress (mid-write, before its ack...).
        third = stack.enter_context(worker("third", tmp_path))
        wait_lock_free(redis_client)
        tasks.flush.delay()
        wait_for(lambda: UserActivity.objects.count() > 2 * BATCH, 30, "the third run to write")
        third.kill()
        snapshots.append(db_snapshot())
        record(users, 10_000, rng, base + 2400)

        stack.enter_context(worker("fourth", tmp_path))
        drain(redis_client)
        snapshots.append(db_snapshot())
    assert_history(redis_client, snapshots, users)


def test_a_worker_killed_mid_flush_is_taken_over_within_two_intervals(redis_client, tmp_path):
    """A worker SIGKILLed while its flush holds a claim and the flush lock: the lock expires and the
    claim is handed back before the next tick, so the run sent one interval after the kill, or the
    one after it, writes everything. Every other job keeps production's 60 s lock, as the flush
    had before: then both runs skipped."""
    interval, users, rng, base = 4, 3_000, random.Random(13), time.time() - 7200
    record(users, users, rng, base, everyone=True)
    timing = {"ACTIVITY_FLUSH_INTERVAL": str(interval)}
    timing["ACTIVITY_TEST_CONSTANTS"] = json.dumps({"activity.services.locks.JOB_LOCK_TTL": 60})
    its_queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-doomed"
    with (
        worker("taker", tmp_path, **timing) as taker,
        worker("doomed", tmp_path, queue=its_queue, ACTIVITY_TEST_PAUSE_AFTER_CLAIM="1", **timing) as doomed,
    ):
        for proc in (taker, doomed):
            wait_for(lambda proc=proc: " ready." in proc.log.read_text(), 60, f"{proc.log.stem} to start")
        tasks.flush.apply_async(queue=its_queue)
        wait_for(lambda: "test pause after claiming batch 1" in doomed.log.read_text(), 30, "the claim")
        doomed.kill()
        killed = time.monotonic()
        assert len(stored(redis_client, "claimed")) == BATCH
        assert redis_client.pttl(keys.lock("job:flush")) > 0  # killed holding its lock
        runs = []
        for tick in (1, 2):
            time.sleep(max(0.0, killed + tick * interval - time.monotonic()))
            runs.append(tasks.flush.delay().get(timeout=30))
    assert sum(run.get("reaped", 0) for run in runs) == BATCH, runs
    assert len(stored(redis_client, "claimed")) == len(stored(redis_client, "dirty")) == 0
    assert_db_equals_redis(redis_client, users)


def task_results() -> list[dict]:
    """Every finished job run this test's workers stored in the result backend (another database of
    the activity Redis, or on a cluster run the standalone server beside it)."""
    results = []
    backend = redis.Redis.from_url(settings.CELERY_RESULT_BACKEND, decode_responses=True)
    for key in backend.scan_iter(match="celery-task-meta-*", count=500):
        meta = json.loads(backend.get(key))
        if isinstance(meta.get("result"), dict) and "job" in meta["result"]:
            results.append(meta["result"])
    return results


def test_two_workers_and_two_beats_never_overlap_and_never_go_back(redis_client, tmp_path):
    users, rng, base = 5_000, random.Random(7), time.time() - 7200
    # Runs must end within a tick or two (so each job runs several times) while two beats send every tick.
    constants = {"activity.schedule.PRUNE_INTERVAL": 1, "activity.schedule.SWEEP_INTERVAL": 1}
    constants["activity.services.flush.BATCH"] = 200
    schedule = {"ACTIVITY_FLUSH_INTERVAL": "2", "ACTIVITY_TEST_CONSTANTS": json.dumps(constants)}
    # Each flush holds its lock a while after its claim (within its 1.2 s soft time limit), so the
    # run the other beat sent for the same tick finds it busy.
    schedule.update(ACTIVITY_TEST_PAUSE_AFTER_CLAIM="1", ACTIVITY_TEST_PAUSE_SECONDS="0.5")
    snapshots = []
    with ExitStack() as stack:
        for name in ("w1", "w2"):
            stack.enter_context(worker(name, tmp_path, **schedule))
        for name in ("beat1", "beat2"):
            stack.enter_context(beat(name, tmp_path, **schedule))
        record(users, users, rng, base, everyone=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            record(users, 2000, rng, base + (deadline - time.monotonic()) * 100)
            snapshots.append(db_snapshot())
            time.sleep(0.2)
        drain(redis_client)
        snapshots.append(db_snapshot())
    assert_history(redis_client, snapshots, users)

    runs = [r for r in task_results() if r["worker"].split("@")[0] in {"w1", "w2"}]
    for job in ("flush", "prune", "sweep"):
        ran = sorted((r for r in runs if r["job"] == job and r["ran"]), key=lambda r: r["started"])
        assert len(ran) >= 3, f"{job} ran only {len(ran)} times"
        for earlier, later in itertools.pairwise(ran):
            assert later["started"] >= earlier["finished"], f"two {job} runs overlapped: {earlier} {later}"
    # Both workers took jobs (which one won a given lock is up to the broker's delivery order).
    busy_workers = {r["worker"].split("@")[0] for r in runs}
    assert busy_workers == {"w1", "w2"}, busy_workers
    assert any(not r["ran"] for r in runs), "no run ever found its job busy: the test had no contention"


def rabbitmq_answers() -> bool:
    try:
        with socket.create_connection(RABBITMQ, timeout=1):
            return True
    except OSError:
        return False


RABBITMQ = ("127.0.0.1", 5672)
AMQP_URL = "amqp://guest@127.0.0.1:5672//"


@pytest.mark.skipif(not rabbitmq_answers(), reason="nothing answers on 127.0.0.1:5672 (RabbitMQ)")
def test_a_worker_on_rabbitmq_flushes_the_same(redis_client, tmp_path):
    """The broker is Celery's business: the same flush task, sent through RabbitMQ (amqp://), moves
    the same changes from Redis (standalone or cluster) to the database."""
    users, rng, base = 3_000, random.Random(11), time.time() - 7200
    record(users, users, rng, base, everyone=True)
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    with worker("rabbit", tmp_path, CELERY_BROKER_URL=AMQP_URL) as proc, app.connection_for_write(AMQP_URL) as amqp:
        wait_for(lambda: " ready." in proc.log.read_text(), 60, "the worker to consume from RabbitMQ")
        try:
            tasks.flush.apply_async(connection=amqp, ignore_result=True)
            wait_for(lambda: UserActivity.objects.count() == users, 60, "the flush through RabbitMQ")
            wait_for(lambda: "] succeeded" in proc.log.read_text(), 30, "the task's end in the worker's log")
        finally:
            amqp.default_channel.queue_delete(queue)  # the run's queue: nothing left on the broker
    assert_db_equals_redis(redis_client, users)
    # The run's log line, once: the project's LOGGING has one handler, the root's, which the worker
    # replaces with its own (a handler of the activity logger's own wrote each line twice).
    assert proc.log.read_text().count(f"flush: {users} members") == 1, proc.log.read_text()
