"""The management commands for the long jobs, run as a site runs them: each does its job and says
so in one summary line, a newer value is never moved back, Ctrl-C loses nothing and a rerun
finishes (the backfill interrupted for real: SIGINT to a subprocess after its first batch), bad
input changes nothing, and the progress bar shows on a terminal only."""

from __future__ import annotations

import datetime as dt
import fcntl
import io
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.utils import timezone

from activity import calendar, clock
from activity.events import Event
from activity.models import DailyRollup, UserActivity
from activity.services import flush, ingest, last_seen, locks
from activity.store import keys, partitioning
from activity.store.flush import FlushQueue
from activity.store.groups import INDEX_PARTITIONS
from activity.store.last_seen import by_partition
from project.redis_server import free_port
from tests.celery_procs import worker_database_url
from tests.last_seen_state import per_partition, stored
from tests.redis_counts import CommandDelta

ROOT = Path(__file__).resolve().parent.parent
BAR = re.compile(r"\d+%\|.*\| *\d+/\d+ \[\d\d:\d\d<\d\d:\d\d")  # tqdm: percent, bar, n/total [elapsed<ETA


def run(name: str, *args: str) -> str:
    """Run a command in this process with stdout captured (not a terminal); its output."""
    out = io.StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


def make_users(count: int, newest: float) -> list:
    """``count`` users whose last logins are a minute apart, the last one at ``newest``."""
    user_model = get_user_model()
    user_model.objects.bulk_create(
        user_model(username=f"user{n}", last_login=dt.datetime.fromtimestamp(newest - 60 * (count - n), dt.UTC))
        for n in range(count)
    )
    return list(user_model.objects.order_by("pk"))


def login_ts(user) -> float:
    return round(user.last_login.timestamp(), 3)


# --- activity_backfill --------------------------------------------------------------------------


@pytest.mark.django_db
def test_backfill_seeds_last_seen_and_never_moves_a_newer_one_back(redis_client):
    now = clock.now()
    users = make_users(6, now - 3600)
    back_since, older, absent, future, never = users[0], users[1], users[2], users[3], users[4]
    get_user_model().objects.filter(pk=never.pk).update(last_login=None)
    get_user_model().objects.filter(pk=future.pk).update(last_login=timezone.now() + dt.timedelta(days=1))
    last_seen.seed({str(back_since.pk): now - 10, str(older.pk): login_ts(older) - 86400})

    out = run("activity_backfill", "--batch-size", "2")

    assert out.strip().splitlines() == [
        "activity_backfill: 5 users with a last login read in 3 batches: "
        "3 last seen moved forward, 1 already as new or newer (kept), 1 skipped; "
        "4 first active days new or moved back.",
        "activity_backfill: 0 groups rebuilt, 0 memberships with a bit.",
    ]
    seen = last_seen.get_many(str(user.pk) for user in users)
    assert seen[str(back_since.pk)] == now - 10  # came back since: kept
    assert seen[str(older.pk)] == login_ts(older)
    assert seen[str(absent.pk)] == login_ts(absent)
    assert seen[str(users[5].pk)] == login_ts(users[5])
    assert seen[str(future.pk)] is None and seen[str(never.pk)] is None
    # Idempotent: a second run moves nothing.
    again = run("activity_backfill")
    assert "0 last seen moved forward, 4 already as new or newer (kept), 1 skipped" in again
    assert "0 first active days new or moved back" in again
    # The moved users are marked changed, as the ones seeded above: the next flush writes their rows.
    assert "4 rows written" in run("activity_flush")
    assert set(UserActivity.objects.values_list("user_id", flat=True)) == {
        str(user.pk) for user in (back_since, older, absent, users[5])
    }


@pytest.mark.django_db
def test_backfill_costs_bounded_queries_and_round_trips_per_batch(redis_client, django_assert_num_queries):
    users = [str(user.pk) for user in make_users(25, clock.now() - 60)]
    run("activity_backfill")  # loads the scripts, so what follows is the steady state
    # A count; per batch the users and their activity rows; the empty end; the activity rows' pass;
    # then the groups' membership bitmaps (no group: one query).
    with django_assert_num_queries(10), CommandDelta(redis_client) as delta:
        run("activity_backfill", "--batch-size", "10")
    # Per batch one pipeline of "ZADD unless smaller" (one a last-seen partition the batch touches)
    # and the users' group index entries (an HMGET a partition of the index), then the first days:
    # one call assigning dense ids, one BITFIELD read, and one first_active call per day (one, or two
    # when the 25 minutes of logins span a local midnight).
    batches = [users[start : start + 10] for start in range(0, 25, 10)]
    days = len({calendar.day_of(login_ts(user)) for user in get_user_model().objects.all()})
    assert delta.calls["evalsha"] == sum(len(by_partition(batch)) for batch in batches) + 5 + days
    assert delta.calls["hmget"] == sum(len(partitioning.spread(batch, INDEX_PARTITIONS)) for batch in batches)
    assert not {"scan", "keys", "sort", "zrange"} & set(delta.calls)


@pytest.mark.django_db
def test_backfill_refuses_a_bad_batch_size_and_writes_nothing(redis_client):
    make_users(3, clock.now() - 60)
    for size in ("0", "10001"):
        with pytest.raises(CommandError, match="--batch-size"):
            run("activity_backfill", "--batch-size", size)
    assert stored(redis_client) == {}


# The real command in a subprocess, paused once its first batch is written, as it starts reading the
# second (a test-only wrapper of the users query), so the test can send SIGINT mid-way.
INTERRUPTIBLE = """
import signal, sys, time
# Ctrl-C as a terminal delivers it, even when the run's shell started it in the background (which
# leaves SIGINT ignored in its children, so Python never installs its KeyboardInterrupt handler).
signal.signal(signal.SIGINT, signal.default_int_handler)
import django
django.setup()
from django.core.management import execute_from_command_line
from activity.services import backfill


written = []
backfill.batch_seeded.connect(lambda sender, batch, **kwargs: written.append(batch), weak=False)
query = backfill.users_to_seed

def paused_query():
    if written:
        print("first batch written", flush=True)
        time.sleep(120)
    return query()

backfill.users_to_seed = paused_query
execute_from_command_line(["manage.py", "activity_backfill", *sys.argv[1:]])
"""


def subprocess_env() -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": worker_database_url(), "DJANGO_SETTINGS_MODULE": "project.settings"}


@pytest.mark.django_db(transaction=True)
def test_an_interrupted_backfill_loses_nothing_and_a_rerun_finishes(redis_client):
    now = clock.now()
    users = make_users(35, now - 7200)
    ids = [str(user.pk) for user in users]
    # Every third user came back since their last login (newer in Redis); others are older there.
    newer = {ids[n]: now - n for n in range(0, 35, 3)}
    older = {ids[n]: login_ts(users[n]) - 600 for n in range(1, 35, 3)}
    last_seen.seed({**newer, **older})
    before = last_seen.get_many(ids)

    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTIBLE, "--batch-size", "10"],
        cwd=ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the backfill never finished its first batch"
        assert proc.stdout.readline().strip() == "first batch written"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted: 10 of 35 users seeded" in err and "Traceback" not in err
    assert out == ""  # not a terminal: no bar, and no summary for a run that did not finish

    after = last_seen.get_many(ids)
    expected = {user_id: max(before[user_id] or 0, login_ts(user)) for user_id, user in zip(ids, users, strict=True)}
    assert {u: after[u] for u in ids[:10]} == {u: expected[u] for u in ids[:10]}  # the first batch, whole
    assert {u: after[u] for u in ids[10:]} == {u: before[u] for u in ids[10:]}  # the rest untouched

    out = run("activity_backfill", "--batch-size", "10")
    assert "35 users with a last login read in 4 batches" in out
    assert last_seen.get_many(ids) == expected
    assert all(last_seen.get_many(newer)[u] == ts for u, ts in newer.items())  # never moved back


# --- activity_flush -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_interrupted_flush_hands_its_claims_back_and_a_rerun_writes_everything(redis_client, monkeypatch, settings):
    settings.ACTIVITY_LAST_SEEN_PARTITIONS = 16
    monkeypatch.setattr(flush, "BATCH", 16)  # one from each partition
    now = clock.now()
    latest = {user: now - n for n, user in enumerate(per_partition(3))}  # 48
    last_seen.seed(latest)

    def interrupt(sender, batch, **kwargs):
        if batch == 2:
            raise KeyboardInterrupt

    flush.batch_claimed.connect(interrupt, dispatch_uid="tests.interrupt_flush")
    try:
        with pytest.raises(CommandError, match="interrupted") as stopped:
            run("activity_flush")
    finally:
        flush.batch_claimed.disconnect(dispatch_uid="tests.interrupt_flush")
    assert stopped.value.returncode == 130
    backlog = FlushQueue(redis_client).backlog()
    assert (backlog.dirty, backlog.claimed) == (32, 0)  # batch 1 written; batch 2 handed back at once
    assert UserActivity.objects.count() == 16
    assert redis_client.exists(keys.lock("job:flush")) == 0  # the lock went with the run

    assert run("activity_flush").strip() == (
        "activity_flush: 32 rows written in 2 batches; 0 stale claims handed back; 0 changes waiting."
    )
    assert {row.user_id: row.last_seen.timestamp() for row in UserActivity.objects.all()} == pytest.approx(latest)


@pytest.mark.django_db
def test_flush_waits_for_a_scheduled_run_holding_the_lock(redis_client):
    last_seen.seed({"a": clock.now()})
    taken, release = threading.Event(), threading.Event()

    def scheduled_run():
        with locks.exclusive_job("flush") as acquired:
            assert acquired
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=scheduled_run)
    holder.start()
    taken.wait(10)
    threading.Timer(0.5, release.set).start()
    started = time.monotonic()
    out = run("activity_flush")
    holder.join()
    assert time.monotonic() - started >= 0.4  # it waited for the release rather than skip or overlap
    assert out.startswith("activity_flush: 1 row written in 1 batch;")


# --- activity_sweep -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_sweep_dry_run_changes_nothing_then_the_sweep_repairs(redis_client):
    session, lock = keys.session("42"), keys.lock("job:stray")
    redis_client.set(session, "x")
    redis_client.set(lock, "x")

    out = run("activity_sweep", "--dry-run")
    assert "1 would get a TTL, 1 would be deleted, 0 legacy first-visit hashes would be merged (dry run" in out
    assert redis_client.pttl(session) == -1 and redis_client.pttl(lock) == -1

    out = run("activity_sweep")
    assert out.startswith(
        "activity_sweep: 2 keys of ours scanned (0 long-lived, left alone); 1 given a TTL, 1 deleted, 0 legacy"
    )
    assert 0 < redis_client.ttl(session) <= 60 and not redis_client.exists(lock)
    assert "0 given a TTL, 0 deleted" in run("activity_sweep")


def test_a_command_with_redis_down_ends_with_one_line():
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"), pytest.raises(CommandError) as error:
        run("activity_sweep")
    assert str(error.value).startswith("Redis cannot serve (connection")


# --- activity_rollup ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_rollup_recomputes_a_range_of_days_and_is_idempotent(redis_client):
    today = calendar.day_of(clock.now())
    days = [today - dt.timedelta(days=n) for n in (3, 2, 1)]
    for n, day in enumerate(days):
        noon = dt.datetime.combine(day, dt.time(12), dt.UTC).timestamp()
        ingest.record_events([Event(user=f"u{i}", ts=noon, path="/p") for i in range(n + 1)])

    for _ in range(2):
        out = run("activity_rollup", "--from", days[0].isoformat(), "--to", days[-1].isoformat())
        assert out.strip() == f"activity_rollup: 3 days rolled up, {days[0]} to {days[-1]}."
        rows = {row.day: (row.active_users, row.page_views) for row in DailyRollup.objects.all()}
        assert rows == {days[0]: (1, 1), days[1]: (2, 2), days[2]: (3, 3)}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("first", "last", "reason"),
    [
        (1, 3, "ends .* before it starts"),
        (2, -1, "is not between today and 35 days ago"),  # reaches tomorrow
        (40, 1, "is not between today and 35 days ago"),  # starts beyond the retention
    ],
)
def test_rollup_refuses_a_bad_range_before_writing_anything(redis_client, first, last, reason):
    today = calendar.day_of(clock.now())
    ingest.record_events([Event(user="u", ts=clock.now() - 86400, path="/p")])
    with pytest.raises(CommandError, match=reason):
        run(
            "activity_rollup",
            "--from",
            str(today - dt.timedelta(days=first)),
            "--to",
            str(today - dt.timedelta(days=last)),
        )
    assert DailyRollup.objects.count() == 0


def test_rollup_refuses_a_date_it_cannot_read():
    with pytest.raises(CommandError, match="is not a date as YYYY-MM-DD"):
        run("activity_rollup", "--from", "2026-13-01", "--to", "2026-11-02")


# --- the progress bar ---------------------------------------------------------------------------


def on_terminal(*args: str) -> str:
    """Run ``manage.py <args>`` with stdout and stderr on a pseudo-terminal of 120 columns; its output."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=subprocess_env(),
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0, b"".join(chunks)
    return b"".join(chunks).decode()


@pytest.mark.django_db(transaction=True)
def test_progress_bar_with_eta_on_a_terminal_only(redis_client):
    make_users(30, clock.now() - 60)
    shown = on_terminal("activity_backfill", "--batch-size", "10")
    assert BAR.search(shown) and "100%" in shown and "30/30" in shown
    assert "activity_backfill: 30 users with a last login read in 3 batches" in shown

    quiet = on_terminal("activity_backfill", "--no-progress")
    assert not BAR.search(quiet) and "%|" not in quiet
    assert "activity_backfill: 30 users" in quiet

    piped = subprocess.run(
        [sys.executable, "manage.py", "activity_backfill"],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert piped.returncode == 0, piped.stderr
    assert piped.stdout.strip().startswith("activity_backfill: 30 users") and "%|" not in piped.stdout + piped.stderr
