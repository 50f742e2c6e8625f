"""The flush, prune and sweep services against the real Redis and database (no worker here)."""

from __future__ import annotations

import datetime as dt
import time

import pytest
import redis
from django.contrib.auth import get_user_model
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext

from activity import clock, conf, managers, tasks
from activity.errors import StoreUnavailable
from activity.models import UserActivity
from activity.schedule import beat_schedule
from activity.services import flush, last_seen, locks, sweep
from activity.store import keys
from activity.store import last_seen as last_seen_store
from activity.store.client import get_client, is_cluster
from activity.store.flush import FlushQueue
from activity.store.last_seen import partition_count
from jobs import reengagement
from tests.last_seen_state import per_partition, stored
from tests.redis_counts import command_calls


@pytest.fixture(autouse=True)
def sixteen_partitions(settings):
    """Last seen over 16 partitions, as on a Cluster: a flush's claims and acks a script each."""
    settings.ACTIVITY_LAST_SEEN_PARTITIONS = 16


T0 = 1_790_000_000.0


@pytest.fixture
def now(monkeypatch):
    """A movable clock: ``now.t`` is what ``clock.now()`` answers."""

    class Now:
        t = T0 + 1000

    monkeypatch.setattr(clock, "now", lambda: Now.t)
    return Now


def db_last_seen() -> dict[str, float]:
    return {row.user_id: row.last_seen.timestamp() for row in UserActivity.objects.all()}


def seen(redis_client, user: str) -> float:
    return stored(redis_client).get(user)


@pytest.mark.django_db
def test_upsert_keeps_the_greater_last_seen_and_fills_the_account(now):
    account = get_user_model().objects.create_user("alice")
    UserActivity.objects.build_upsert([("x", T0 + 10), (str(account.pk), T0 + 5)]).execute()
    UserActivity.objects.build_upsert([("x", T0 + 3), (str(account.pk), T0 + 7), ("new", T0)]).execute()
    rows = {row.user_id: row for row in UserActivity.objects.all()}
    assert rows["x"].last_seen.timestamp() == T0 + 10  # an older value never wins
    assert rows[str(account.pk)].last_seen.timestamp() == T0 + 7
    assert rows[str(account.pk)].account_id == account.pk
    assert rows["x"].account_id is None and rows["new"].first_seen.timestamp() == T0


@pytest.mark.django_db
def test_upsert_takes_any_valid_id_and_only_links_existing_users(now):
    account = get_user_model().objects.create_user("bob")
    odd = ["NULL", "null", "99999999999999999999", "-3", "0", "a.b:c@d-e_f", str(account.pk + 1000), f"0{account.pk}"]
    UserActivity.objects.build_upsert(
        [(user_id, T0 + n) for n, user_id in enumerate([*odd, str(account.pk)])]
    ).execute()
    rows = {row.user_id: row for row in UserActivity.objects.all()}
    # NULL-looking, out-of-range and zero-padded ids are plain ids: only str(pk) is the user.
    assert sorted(rows) == sorted([*odd, str(account.pk)])
    assert {user_id: row.account_id for user_id, row in rows.items() if row.account_id} == {str(account.pk): account.pk}
    assert [rows[user_id].last_seen.timestamp() for user_id in odd] == [T0 + n for n in range(len(odd))]


@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the comma-joined batch is PostgreSQL's")
def test_an_id_with_a_comma_fails_the_batch_before_anything_is_written(now):
    with pytest.raises(ValueError, match="comma"):
        UserActivity.objects.build_upsert([("fine", T0), ("not,valid", T0)]).execute()
    assert not UserActivity.objects.exists()


@pytest.mark.django_db
def test_flush_is_one_statement_per_batch(redis_client, now):
    flush.flush()  # on nothing: loads the scripts, so their first NOSCRIPT retries are not counted below
    FlushQueue(redis_client).ack("0", per_partition(1, "nobody"), now.t)  # and the ack's, on every node
    users = per_partition(16)  # 256
    last_seen.seed({user: T0 + i / 1000 for i, user in enumerate(users)})
    before = command_calls(redis_client)["evalsha"]
    with CaptureQueriesContext(connection) as queries:
        result = flush.flush(batch_size=160)  # 10 from each partition, then the 6 left
    assert (result.flushed, result.batches, result.remaining) == (256, 2, 0)
    # One reap, then a claim and an ack per batch, and the final empty claim, each one script a
    # partition in one round trip: never a call per user.
    assert command_calls(redis_client)["evalsha"] - before == partition_count() * (1 + 2 * 2 + 1)
    # The upsert looks the Django users up itself: one statement per batch, none per user.
    statements = [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert len(statements) == 2 and all("INSERT INTO" in sql for sql in statements)
    assert db_last_seen() == {user: pytest.approx(T0 + i / 1000, abs=1e-6) for i, user in enumerate(users)}
    assert len(stored(redis_client, "dirty")) == len(stored(redis_client, "claimed")) == 0


@pytest.mark.django_db
def test_a_run_out_of_budget_stops_without_leaving_a_claim_behind(redis_client, now):
    scores = {user: T0 + i for i, user in enumerate(per_partition(3))}  # 48
    last_seen.seed(scores)
    result = flush.flush(batch_size=16, budget=0)  # no time for a second batch: none is claimed ahead
    assert (result.flushed, result.batches, result.remaining) == (16, 1, 32)
    assert len(stored(redis_client, "claimed")) == 0  # nothing waits for the reaper
    assert flush.flush(batch_size=16).flushed == 32
    assert db_last_seen() == scores


@pytest.mark.django_db
def test_update_during_a_flush_is_flushed_by_the_next_batch(redis_client, now):
    last_seen.seed({"a": T0, "b": T0})
    claim_time, rows, _ = FlushQueue(redis_client).claim(now.t, 10)
    assert sorted(rows) == [("a", T0), ("b", T0)]
    last_seen.seed({"a": T0 + 50})  # lands between claim and commit
    UserActivity.objects.build_upsert(rows).execute()
    assert FlushQueue(redis_client).ack(claim_time, ["a", "b"], now.t) == (2, [])
    assert list(stored(redis_client, "dirty")) == ["a"]
    flush.flush()
    assert db_last_seen() == {"a": T0 + 50, "b": T0}


@pytest.mark.django_db
def test_a_late_event_after_a_flush_marks_nothing_and_the_flush_writes_nothing(redis_client, now):
    """Only what moved is marked: a late event leaves its user out of the next flush."""
    last_seen.seed({"a": T0 + 50})
    flush.flush()
    assert last_seen.seed({"a": T0, "b": T0}) == 1  # only b moved
    assert set(stored(redis_client, "dirty")) == {"b"}
    assert flush.flush().flushed == 1
    assert db_last_seen() == {"a": T0 + 50, "b": T0}


@pytest.mark.django_db
def test_reaper_returns_dead_claims_and_a_late_ack_keeps_a_newer_claim(redis_client, now):
    last_seen.seed({"a": T0, "b": T0})
    dead_time, _, _ = FlushQueue(redis_client).claim(now.t, 10)  # its worker "dies" here
    now.t += locks.job_ttl("flush") - 1
    assert flush.reap_stale_claims() == 0  # the holder may still be alive: keep its claim
    now.t += 2
    assert flush.reap_stale_claims() == 2
    new_time, rows, _ = FlushQueue(redis_client).claim(now.t, 10)
    assert len(rows) == 2
    assert FlushQueue(redis_client).ack(dead_time, ["a", "b"], now.t).removed == 0  # the slow old run wakes up
    assert len(stored(redis_client, "claimed")) == 2
    assert FlushQueue(redis_client).ack(new_time, ["a", "b"], now.t).removed == 2


@pytest.mark.django_db
def test_a_failed_write_acknowledges_nothing_and_the_next_run_writes_everything(redis_client, now, monkeypatch):
    scores = {user: T0 + i for i, user in enumerate(per_partition(4))}  # 64
    last_seen.seed(scores)
    execute = managers.Upsert.execute
    calls = []

    def fail_second(upsert):
        calls.append(upsert)
        if len(calls) == 2:
            raise RuntimeError("database went away")
        execute(upsert)

    monkeypatch.setattr(managers.Upsert, "execute", fail_second)
    with pytest.raises(RuntimeError, match="went away"):
        flush.flush(batch_size=16)  # one from each partition
    # Batch 1 committed and was acknowledged; batch 2 failed and batch 3, claimed ahead while 2 was
    # being written, never reached the database: both stay claimed, the other 16 changes dirty.
    assert len(db_last_seen()) == 16
    assert len(stored(redis_client, "claimed")) == 32
    assert len(stored(redis_client, "dirty")) == 16
    monkeypatch.setattr(managers.Upsert, "execute", execute)
    now.t += locks.job_ttl("flush") + 1  # the failed run's claims are stale now
    result = flush.flush(batch_size=16)
    assert (result.reaped, result.flushed, result.remaining) == (32, 48, 0)
    assert db_last_seen() == scores
    assert len(stored(redis_client, "claimed")) == 0


@pytest.mark.django_db
def test_status_reports_backlog_and_lag_and_healthz_stays_200(client, staff, redis_client, now):
    assert flush.status().as_dict() == {"backlog": 0, "claimed": 0, "lag": 0.0}
    last_seen.seed(dict.fromkeys(per_partition(2)[:2], T0))  # both in one partition
    FlushQueue(redis_client).claim(now.t + 5, 1)  # one of each partition: one of the two
    now.t += 3600
    assert flush.status().as_dict() == {"backlog": 2, "claimed": 1, "lag": 3600.0}
    client.force_login(staff)  # the flush figures are for staff (anonymous clients get the status only)
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert ("redis_cluster" in body) == is_cluster(redis_client)  # a cluster's state, to staff
    body.pop("redis_cluster", None)
    assert body == {"redis": "ok", "database": "ok", "flush": {"backlog": 2, "claimed": 1, "lag": 3600.0}}


@pytest.mark.django_db
def test_prune_never_removes_an_unflushed_member(redis_client, now):
    old = {f"old{i}": T0 for i in range(30)}
    last_seen.seed(old)
    flush.flush(batch_size=7)
    last_seen.seed({"dirty1": T0, "dirty2": T0, "claimed": T0 - 5, "young": now.t})
    FlushQueue(redis_client).claim(now.t, 1)  # equal change times: claims "claimed", first by name
    assert stored(redis_client, "claimed").get("claimed") is not None
    removed, kept = last_seen.prune(retention=100, step=4)
    assert (removed, kept) == (30, 3)
    assert sorted(stored(redis_client)) == ["claimed", "dirty1", "dirty2", "young"]
    assert len(db_last_seen()) == 30  # the database keeps what Redis forgot


def test_sweep_repairs_strays_in_small_steps_and_never_touches_other_keys(redis_client, now):
    prefix = keys.prefix()
    outside = [f"{prefix[:-1]}X:stray", "someone-else:key", "_kombu.binding.test"]
    for key in outside:
        redis_client.set(key, "1")
    for i in range(600):
        redis_client.set(f"{prefix}stray:{i}", "1")  # unknown family: gets the default TTL
    redis_client.set(keys.lock("job:orphan"), "token")  # a lock without TTL: deleted
    redis_client.set(f"{prefix}cache:1:x", "1", ex=50)  # has a TTL: untouched
    last_seen.seed({"a": T0})  # long-lived keys: untouched
    before = command_calls(redis_client)["scan"]
    result = sweep.sweep(count=200)
    scans = command_calls(redis_client)["scan"] - before  # every primary's, on a cluster
    try:
        assert result == sweep.SweepResult(scanned=604, long_lived=2, repaired=600, deleted=1, merged=0)
        assert scans >= 3  # 604 keys at COUNT 200: several small steps, never one big KEYS
        assert 0 < redis_client.ttl(f"{prefix}stray:7") <= 86400
        assert not redis_client.exists(keys.lock("job:orphan"))
        assert 0 < redis_client.ttl(f"{prefix}cache:1:x") <= 50
        home = last_seen_store.partition_of("a")
        assert redis_client.ttl(home.seen) == -1 and redis_client.ttl(home.dirty) == -1
        assert all(redis_client.ttl(key) == -1 for key in outside)
        assert sweep.sweep().repaired == 0  # nothing left to do
    finally:
        redis_client.delete(*outside)


def test_beat_entries_expire_after_their_interval_and_jobs_end_before_their_lock():
    schedule = beat_schedule()
    assert {entry["task"] for entry in schedule.values()} >= {"activity.flush", "activity.prune", "activity.sweep"}
    for entry in schedule.values():
        # Interval entries expire after one interval; crontab entries (the daily rollup) carry their own.
        expected = entry["schedule"] if isinstance(entry["schedule"], float) else entry["options"]["expires"]
        assert 0 < entry["options"]["expires"] == expected
    for task in (tasks.flush, tasks.prune, tasks.sweep):
        assert task.soft_time_limit < task.time_limit < locks.job_ttl(task.name.removeprefix("activity."))
    # The flush's lock, and the age past which its claims are handed back, end before the next tick:
    # a run killed anywhere is taken over by the next tick's run or the one after; a live run, ended
    # by its time limit before that age, never has its claims taken.
    assert tasks.flush.time_limit < locks.job_ttl("flush") < conf.settings.FLUSH_INTERVAL


def test_a_busy_job_is_skipped_and_the_lock_is_released_after(redis_client):
    with locks.exclusive_job("flush") as first:
        assert first is True
        assert 0 < redis_client.pttl(keys.lock("job:flush")) <= locks.job_ttl("flush") * 1000
        with locks.exclusive_job("flush") as second:
            assert second is False
        assert redis_client.exists(keys.lock("job:flush")) == 1  # the skipped run released nothing
    assert redis_client.exists(keys.lock("job:flush")) == 0


def pause_every_server(redis_client, ms: int) -> None:
    """CLIENT PAUSE ALL on the run's server, or on every primary of its cluster."""
    if is_cluster(redis_client):
        for node in redis_client.get_primaries():
            redis.Redis(port=node.port).client_pause(ms)
    else:
        redis_client.client_pause(ms)


@pytest.mark.django_db
def test_a_flush_that_times_out_releases_its_lock_and_the_next_run_runs(redis_client, now, monkeypatch):
    """Redis pauses (CLIENT PAUSE) longer than the client waits, mid-flush: the run fails, its
    release is tried again until Redis answers, so the next run is not skipped for the lock's TTL."""
    last_seen.seed({"a": T0})
    claim = FlushQueue.claim

    def pause_then_claim(queue, *args, **kwargs):
        pause_every_server(redis_client, 1500)  # three times ACTIVITY_REDIS_TIMEOUT
        return claim(queue, *args, **kwargs)

    monkeypatch.setattr(FlushQueue, "claim", pause_then_claim)
    with pytest.raises(StoreUnavailable), locks.exclusive_job("flush"):
        flush.flush()
    assert redis_client.exists(keys.lock("job:flush")) == 0
    monkeypatch.setattr(FlushQueue, "claim", claim)
    now.t += locks.job_ttl("flush") + 1  # the failed run's claim, if the paused server took it, is stale now
    with locks.exclusive_job("flush") as acquired:
        assert acquired
        assert flush.flush().remaining == 0
    assert db_last_seen() == {"a": T0}


@pytest.mark.django_db
def test_a_flush_whose_lock_request_timed_out_runs_and_the_next_run_runs(stalling_redis, now, caplog):
    """Redis stalls (DEBUG SLEEP) as a flush asks for its lock: the request times out, yet Redis
    runs it once awake. The run asks again with the same token and holds the lock its lost request
    took: it flushes, releases, and the next run is not kept out until the lock's TTL."""
    client = get_client()
    last_seen.seed({"a": T0})
    with locks.exclusive_job("flush"):
        pass  # loads the lock's scripts: the stalled EVALSHA finds its script, as in production
    with stalling_redis.stalled(1.5), locks.exclusive_job("flush") as acquired:
        assert "not taken" in caplog.text  # its first request's reply was lost
        assert acquired
        assert flush.flush().flushed == 1
    assert client.exists(keys.lock("job:flush")) == 0
    last_seen.seed({"b": T0})
    with locks.exclusive_job("flush") as acquired:  # the next run
        assert acquired
        assert flush.flush().flushed == 1
    assert db_last_seen() == {"a": T0, "b": T0}


@pytest.mark.django_db
def test_a_lock_held_by_a_request_is_not_retried(redis_client):
    """A request answers now: its lock's release is tried once, and Redis failing it raises."""
    with pytest.raises(StoreUnavailable), locks.exclusive("report", 5.0) as acquired:
        assert acquired
        resumes = time.monotonic() + 1.5
        pause_every_server(redis_client, 1500)
    time.sleep(max(0.0, resumes - time.monotonic()) + 0.1)
    assert redis_client.exists(keys.lock("report")) == 1  # left to its TTL


@pytest.mark.django_db
def test_example_job_mails_each_dormant_user_once(redis_client, now):
    users = get_user_model().objects
    away = users.create_user("away", email="away@example.com")
    back = users.create_user("back", email="back@example.com")
    longer = users.create_user("longer", email="longer@example.com")
    day = 86400
    last_seen.seed({str(away.pk): now.t - 30.5 * day, str(back.pk): now.t - 30.2 * day})
    last_seen.seed({str(longer.pk): now.t - 40 * day, "anon": now.t - 30.1 * day})
    flush.flush()
    last_seen.seed({str(back.pk): now.t - 60})  # back, not yet flushed
    result = reengagement.mail_dormant.run(days=30, page_size=1)
    assert result == {"job": "mail-dormant", "ran": True, "sent": 1}
    assert [message.to for message in mail.outbox] == [["away@example.com"]]
    assert UserActivity.objects.get(user_id=str(away.pk)).last_seen < dt.datetime.now(dt.UTC)
