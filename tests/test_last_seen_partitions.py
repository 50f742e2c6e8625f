"""Last seen split into partitions (16 here, as a Cluster would use): the answers of one ordered
set (online paging included, keyset cursor kept across partitions), a flush that drains every
partition, and the upgrade from an earlier release's layout (one set, or another number of
partitions) that loses no update made while it runs, moves nothing twice and nothing on this layout."""

from __future__ import annotations

import random
import threading
import zlib

import pytest
from django.core.management import call_command

from activity import clock
from activity.models import UserActivity
from activity.services import flush, last_seen
from activity.store import keys
from activity.store import last_seen as store
from activity.store.client import is_cluster
from activity.store.flush import FlushQueue
from tests.last_seen_state import stored

T0 = 1_790_000_000.0
USERS = [f"u{i:03d}" for i in range(300)]


@pytest.fixture(autouse=True)
def sixteen_partitions(settings):
    """The count a Cluster would use: every answer must be one ordered set's all the same."""
    settings.ACTIVITY_LAST_SEEN_PARTITIONS = 16


def one_set() -> store.Partition:
    """The keys of the one-set layout earlier releases kept by default."""
    return store.Partition(
        keys.unpartitioned_last_seen(),
        keys.unpartitioned_last_seen_dirty(),
        keys.unpartitioned_last_seen_claimed(),
        keys.tombstones("ls"),
    )


def old_partition(i: int) -> store.Partition:
    """Partition ``i`` of an earlier release's ``ACTIVITY_LAST_SEEN_PARTITIONS`` layout."""
    return store.Partition(
        keys.last_seen(i), keys.last_seen_dirty(i), keys.last_seen_claimed(i), keys.tombstones(f"ls:{i}")
    )


def write(client, part: store.Partition, scores: dict[str, float]) -> None:
    """Last seen written into ``part`` as an earlier release's script call did, marked changed at T0."""
    args = [repr(T0)]
    for user, ts in scores.items():
        args += [repr(ts), user]
    store.ZADD_UNLESS_SMALLER(client, [part.seen, part.dirty, part.tombstones], args)


def walk(client, since: float, size: int) -> list[tuple[str, float]]:
    rows, cursor = [], None
    while page := store.page_and_count_since(client, since, size, cursor)[0]:
        rows += page
        cursor = (page[-1][1], page[-1][0])
    return rows


def at_home(client, partitions: int) -> bool:
    """Every member of partitions 0 to ``partitions`` - 1 is in the partition its id hashes to now."""
    for i in range(partitions):
        for key in (keys.last_seen(i), keys.last_seen_dirty(i), keys.last_seen_claimed(i)):
            if any(store.partition_index(user) != i for user in client.zrange(key, 0, -1)):
                return False
    return True


@pytest.mark.parametrize("size", [1, 7, 50])
def test_partitions_answer_as_one_set(redis_client, size):
    rng = random.Random(7)
    expected = {user: T0 + rng.choice([0, 1, 1, 1, 2, 3]) for user in USERS}
    last_seen.seed(expected)
    sizes = [redis_client.zcard(part.seen) for part in store.partitions()]
    assert sum(sizes) == len(USERS) and all(sizes)  # spread over every partition
    assert store.get_many(redis_client, [*USERS, "nobody"]) == {**expected, "nobody": None}
    assert store.get(redis_client, USERS[5]) == expected[USERS[5]]
    since = [(user, ts) for user, ts in expected.items() if ts >= T0 + 1]
    assert store.page_and_count_since(redis_client, T0 + 1, 1)[1] == len(since)
    # The merged pages walk one order, ties by user id descending, whatever the page size.
    assert walk(redis_client, T0 + 1, size) == sorted(since, key=lambda row: (row[1], row[0]), reverse=True)


def test_cursor_survives_moves_across_partitions(redis_client):
    last_seen.seed(dict.fromkeys(USERS, T0))
    seen: list[str] = []
    cursor = None
    while rows := store.page_and_count_since(redis_client, T0 - 10, 13, cursor)[0]:
        seen += [user for user, _ in rows]
        cursor = (rows[-1][1], rows[-1][0])
        last_seen.seed({rows[-1][0]: T0 + 5})  # seen again: jumps above the cursor
    assert seen == sorted(USERS, reverse=True)  # nobody skipped or repeated


@pytest.mark.django_db
def test_flush_and_prune_drain_every_partition(redis_client, monkeypatch):
    now = T0 + 100 * 86400
    monkeypatch.setattr(clock, "now", lambda: now)
    scores = {user: T0 + n for n, user in enumerate(USERS)}
    last_seen.seed(scores)
    claim = FlushQueue(redis_client).claim(now, 32)  # a share of 2 from each partition
    assert len(claim.rows) == 32
    assert {store.partition_index(user) for user, _ in claim.rows} == set(range(store.partition_count()))
    assert FlushQueue(redis_client).backlog().claimed == 32
    result = flush.flush(batch_size=160)
    assert result.flushed == len(USERS) - 32 and result.remaining == 0
    assert FlushQueue(redis_client).reap(now, 100) == 32  # the first claim's "worker" died
    flush.flush(batch_size=160)  # reaps the stale claims first
    assert {row.user_id: row.last_seen.timestamp() for row in UserActivity.objects.all()} == scores
    assert FlushQueue(redis_client).backlog().dirty == 0
    assert last_seen.prune(retention=86400) == (len(USERS), 0)  # all flushed, all old
    assert stored(redis_client) == {}


@pytest.mark.django_db
def test_upgrade_from_one_set_loses_no_update_made_while_it_runs(redis_client):
    old = one_set()
    scores = {user: T0 + n for n, user in enumerate(USERS)}
    write(redis_client, old, scores)  # an earlier release's default layout, all changed
    held = USERS[:20]  # an earlier release's flush holds a claim on these
    redis_client.zadd(old.claimed, dict.fromkeys(held, T0 + 1))
    redis_client.zrem(old.dirty, *held)
    write(redis_client, old, {"ghost": T0 - 5})
    redis_client.zrem(old.seen, "ghost")  # a change mark whose member is gone
    writes: dict[str, float] = dict(scores)
    done = threading.Event()

    def writer(seed: int) -> None:
        """Processes of this release, and one still on the earlier release, during the upgrade."""
        rng = random.Random(seed)
        while not done.is_set():
            user = rng.choice(USERS)
            ts = round(T0 + 1000 + rng.random() * 1000, 3)
            if seed == 0:
                write(redis_client, old, {user: ts})
            else:
                last_seen.seed({user: ts})
            writes[f"{user}:{seed}:{ts}"] = ts

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(3)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(3):  # while the writers run; the earlier release's one keeps adding work
            last_seen.upgrade(step=17)
    finally:
        done.set()
        for thread in threads:
            thread.join()
    call_command("activity_upgrade", "--step", "17")  # after the last write of the earlier release
    latest: dict[str, float] = {}
    for name, ts in writes.items():
        user = name.split(":", 1)[0]
        latest[user] = max(latest.get(user, 0.0), ts)
    assert redis_client.exists(old.seen, old.dirty, old.claimed) == 0
    assert store.get_many(redis_client, USERS) == latest  # every update kept, the largest wins
    assert at_home(redis_client, store.partition_count())
    flush.flush(batch_size=160)  # the earlier release's claims became changes again: written too
    assert {row.user_id: row.last_seen.timestamp() for row in UserActivity.objects.all()} == latest


@pytest.mark.django_db
@pytest.mark.parametrize("earlier", [4, 20])
def test_upgrade_from_another_number_of_partitions(redis_client, earlier):
    scores = {user: T0 + n for n, user in enumerate(USERS)}
    homes: dict[int, dict[str, float]] = {}
    for user, ts in scores.items():  # as ACTIVITY_LAST_SEEN_PARTITIONS = earlier placed them
        homes.setdefault(zlib.crc32(user.encode()) % earlier, {})[user] = ts
    for i, part_scores in homes.items():
        write(redis_client, old_partition(i), part_scores)
    held = USERS[:10]
    for user in held:  # claimed by an earlier release's flush
        part = old_partition(zlib.crc32(user.encode()) % earlier)
        redis_client.zadd(part.claimed, {user: T0 + 1})
        redis_client.zrem(part.dirty, user)
    reported: list[int] = []
    moved = last_seen.upgrade(step=17, progress=reported.append)
    assert 0 < moved < len(USERS)  # those already in their partition stay
    steps = [after - before for before, after in zip([0, *reported], reported, strict=False)]
    # A ZSCAN step reads about --step members, or a small set (listpack, at most 128) whole.
    assert max(steps) <= max(2 * 17, 128)
    assert store.get_many(redis_client, USERS) == scores
    # Moved claims became changes again; a claim already in its partition stays for the reaper.
    assert set(stored(redis_client, "dirty")) | set(stored(redis_client, "claimed")) == set(USERS)
    assert set(stored(redis_client, "claimed")) < set(held)
    assert at_home(redis_client, max(earlier, store.partition_count()))
    assert last_seen.upgrade() == 0  # a second run finds nothing to move
    flush.flush(batch_size=160)  # reaps the stale claims first
    assert {row.user_id: row.last_seen.timestamp() for row in UserActivity.objects.all()} == scores


def test_upgrade_on_this_layout_moves_nothing(redis_client, capsys):
    last_seen.seed(dict.fromkeys(USERS, T0))
    call_command("activity_upgrade")
    assert "moved 0 last-seen members" in capsys.readouterr().out
    assert stored(redis_client) == dict.fromkeys(USERS, T0)


def test_partitions_spread_over_the_cluster(redis_client):
    if not is_cluster(redis_client):
        pytest.skip("a standalone server has one node")
    nodes = {redis_client.get_node_from_key(part.seen).name for part in store.partitions()}
    assert len(nodes) == len(redis_client.get_primaries())
