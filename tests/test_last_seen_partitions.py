"""Last seen split into partitions: the same answers as one set (online paging included, keyset
cursor kept across partitions), a flush that drains every partition, and a migration from one set
to N partitions that loses no update made while it runs."""

from __future__ import annotations

import random
import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from activity import clock
from activity.models import UserActivity
from activity.services import flush, last_seen
from activity.store import keys
from activity.store import last_seen as store
from activity.store.client import is_cluster
from activity.store.flush import FlushQueue

T0 = 1_790_000_000.0
USERS = [f"u{i:03d}" for i in range(300)]


def seeded(client, n: int) -> dict[str, float]:
    """The same random last seen (ties included) written under ``n`` partitions."""
    rng = random.Random(7)
    scores = {user: T0 + rng.choice([0, 1, 1, 1, 2, 3]) for user in USERS}
    store.update(client, scores, T0)
    return scores


def walk(client, since: float, size: int) -> list[tuple[str, float]]:
    rows, cursor = [], None
    while page := store.page_since(client, since, size, cursor):
        rows += page
        cursor = (page[-1][1], page[-1][0])
    return rows


@pytest.mark.parametrize("size", [1, 7, 50])
def test_partitions_answer_as_one_set(redis_client, settings, size):
    expected = seeded(redis_client, 1)
    whole = walk(redis_client, T0 + 1, size)
    count = store.count_since(redis_client, T0 + 1)
    redis_client.delete(keys.last_seen(), keys.last_seen_dirty())
    settings.ACTIVITY_LAST_SEEN_PARTITIONS = 4
    seeded(redis_client, 4)
    assert redis_client.exists(keys.last_seen()) == 0
    sizes = [redis_client.zcard(keys.last_seen_partition(i)) for i in range(4)]
    assert sum(sizes) == len(USERS) and all(sizes)  # spread over every partition
    assert store.get_many(redis_client, [*USERS, "nobody"]) == {**expected, "nobody": None}
    assert store.get(redis_client, USERS[5]) == expected[USERS[5]]
    assert store.count_since(redis_client, T0 + 1) == count
    # The merged pages walk the same order, ties by user id descending, whatever the page size.
    assert walk(redis_client, T0 + 1, size) == whole


def test_cursor_survives_moves_across_partitions(redis_client, settings):
    settings.ACTIVITY_LAST_SEEN_PARTITIONS = 4
    store.update(redis_client, dict.fromkeys(USERS, T0), T0)
    seen: list[str] = []
    cursor = None
    while rows := store.page_since(redis_client, T0 - 10, 13, cursor):
        seen += [user for user, _ in rows]
        cursor = (rows[-1][1], rows[-1][0])
        store.update(redis_client, {rows[-1][0]: T0 + 5}, T0)  # seen again: jumps above the cursor
    assert seen == sorted(USERS, reverse=True)  # nobody skipped or repeated


@pytest.mark.django_db
def test_flush_and_prune_drain_every_partition(redis_client, settings, monkeypatch):
    now = T0 + 100 * 86400
    monkeypatch.setattr(clock, "now", lambda: now)
    settings.ACTIVITY_LAST_SEEN_PARTITIONS = 4
    scores = {user: T0 + n for n, user in enumerate(USERS)}
    store.update(redis_client, scores, T0)
    claim = FlushQueue(redis_client).claim(now, 8)  # a share of 2 from each partition
    assert len(claim.rows) == 8
    assert {store.partition_index(user, 4) for user, _ in claim.rows} == {0, 1, 2, 3}
    assert FlushQueue(redis_client).backlog().claimed == 8
    result = flush.flush(batch_size=40)
    assert result.flushed == len(USERS) - 8 and result.remaining == 0
    assert FlushQueue(redis_client).reap(now, 100) == 8  # the first claim's "worker" died
    flush.flush(batch_size=40)
    assert {row.user_id: row.last_seen.timestamp() for row in UserActivity.objects.all()} == scores
    assert FlushQueue(redis_client).backlog().dirty == 0
    assert last_seen.prune(retention=86400) == (len(USERS), 0)  # all flushed, all old
    assert sum(redis_client.zcard(keys.last_seen_partition(i)) for i in range(4)) == 0


@pytest.mark.django_db
def test_migration_loses_no_update_made_while_it_runs(redis_client, settings):
    old = store.partitions(1)[0]
    scores = {user: T0 + n for n, user in enumerate(USERS)}
    store.update(redis_client, scores, T0)  # the unpartitioned layout, all dirty
    FlushQueue(redis_client).claim(T0 + 1, 20)  # a flush of the old layout holds a claim
    store.ZADD_UNLESS_SMALLER(redis_client, [old.seen, old.dirty, old.tombstones], [repr(T0), repr(T0 - 5), "ghost"])
    redis_client.zrem(old.seen, "ghost")  # a change mark whose member is gone
    settings.ACTIVITY_LAST_SEEN_PARTITIONS = 4
    writes: dict[str, float] = dict(scores)
    done = threading.Event()

    def writer(seed: int, layout: int) -> None:
        """Writers of the new layout, and one process still on the old layout, during the move."""
        rng = random.Random(seed)
        target = store.partitions(1)[0]
        while not done.is_set():
            user = rng.choice(USERS)
            ts = round(T0 + 1000 + rng.random() * 1000, 3)
            if layout == 1:
                store.ZADD_UNLESS_SMALLER(
                    redis_client, [target.seen, target.dirty, target.tombstones], [repr(T0), repr(ts), user]
                )
            else:
                store.update(redis_client, {user: ts}, T0)
            writes[f"{user}:{seed}:{ts}"] = ts

    threads = [threading.Thread(target=writer, args=(seed, 1 if seed == 0 else 4)) for seed in range(3)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(3):  # while the writers run; the old-layout one keeps adding work
            last_seen.migrate(step=17)
    finally:
        done.set()
        for thread in threads:
            thread.join()
    call_command("activity_partition_last_seen", "--step", "17")  # after the last old-layout write
    latest: dict[str, float] = {}
    for name, ts in writes.items():
        user = name.split(":", 1)[0]
        latest[user] = max(latest.get(user, 0.0), ts)
    assert redis_client.exists(old.seen, old.dirty, old.claimed) == 0
    assert store.get_many(redis_client, USERS) == latest  # every update kept, the largest wins
    flush.flush(batch_size=100)  # the old layout's claims became changes again: written too
    assert {row.user_id: row.last_seen.timestamp() for row in UserActivity.objects.all()} == latest


def test_migration_needs_partitions(redis_client):
    with pytest.raises(CommandError, match="no partitions"):
        call_command("activity_partition_last_seen")


def test_partitions_spread_over_the_cluster(redis_client, settings):
    if not is_cluster(redis_client):
        pytest.skip("a standalone server has one node")
    nodes = {redis_client.get_node_from_key(keys.last_seen_partition(i)).name for i in range(16)}
    assert len(nodes) == len(redis_client.get_primaries())
