"""Last seen never moves back, even under many processes writing shuffled timestamps at once."""

from __future__ import annotations

import multiprocessing
import random

import pytest

from activity import clock
from activity.events import Event
from activity.services import ingest, last_seen
from activity.store import last_seen as store
from tests.last_seen_state import stored

USERS = 1000
EVENTS_PER_WRITER = 12_500
WRITERS = 4  # 4 x 12,500 = 50,000 events


def _events_for(seed: int) -> list[tuple[str, float]]:
    rng = random.Random(seed)
    return [
        (f"u{rng.randrange(USERS)}", round(rng.uniform(1_700_000_000, 1_800_000_000), 3))
        for _ in range(EVENTS_PER_WRITER)
    ]


def _writer(seed: int) -> None:
    events = _events_for(seed)
    for start in range(0, len(events), 250):
        ingest.record_events([Event(user=u, ts=ts) for u, ts in events[start : start + 250]])


def test_concurrent_shuffled_writers_leave_exact_maxima(redis_client):
    seeds = list(range(WRITERS))
    expected: dict[str, float] = {}
    for seed in seeds:
        for user, ts in _events_for(seed):
            expected[user] = max(ts, expected.get(user, 0.0))
    # Fork so the children inherit Django's settings (and this run's private Redis and prefix).
    ctx = multiprocessing.get_context("fork")
    processes = [ctx.Process(target=_writer, args=(seed,)) for seed in seeds]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    assert stored(redis_client) == expected
    # Every changed user is marked for the database flush.
    assert len(stored(redis_client, "dirty")) == len(expected)


def test_older_event_is_ignored_and_counted_as_unchanged(redis_client, monkeypatch):
    for now, scores, moved in (
        (1.0, {"a": 200.0, "b": 100.0}, 2),
        (2.0, {"a": 150.0, "b": 100.0}, 0),
        (3.0, {"a": 250.0}, 1),
    ):
        monkeypatch.setattr(clock, "now", lambda now=now: now)
        assert last_seen.seed(scores) == moved
    assert store.get_many(redis_client, ["a", "b", "c"]) == {"a": 250.0, "b": 100.0, "c": None}
    # The dirty mark keeps the time of the first unflushed change.
    assert stored(redis_client, "dirty").get("a") == 1.0


def test_duplicates_in_one_batch_keep_the_largest(redis_client):
    result = ingest.record_events([Event("x", 30.0), Event("x", 50.0), Event("x", 40.0)])
    assert (result.accepted, result.last_seen_updated) == (3, 1)
    assert store.get(redis_client, "x") == 50.0


# Scores Lua's tonumber reads and Redis's ZADD refuses (or reads otherwise) among the rest.
@pytest.mark.parametrize("bad", ["x", "", " 5", "5 ", "nan", "inf", "1e999", "0x10", "1e-999"])
def test_script_rejects_a_bad_call_without_writing(redis_client, bad):
    import redis

    with pytest.raises(redis.ResponseError, match="not a number"):
        store.ZADD_UNLESS_SMALLER(
            redis_client,
            [store.partitions()[0].seen, store.partitions()[0].dirty, store.partitions()[0].tombstones],
            ["1", "5", "ok", bad, "bad"],
        )
    assert stored(redis_client) == stored(redis_client, "dirty") == {}


def test_duplicates_in_one_script_call_never_write_a_smaller_score(redis_client):
    last_seen.seed({"m": 10.0})
    part = store.partition_of("m")
    args = ["1", "5", "m", "30", "m", "20", "m", "7", "n", "9", "n"]
    moved = store.ZADD_UNLESS_SMALLER(redis_client, [part.seen, part.dirty, part.tombstones], args)
    assert moved == 2  # m (10 -> 30) and n (new), each counted once
    assert redis_client.zmscore(part.seen, ["m", "n"]) == [30.0, 9.0]


def test_large_calls_span_several_chunks(redis_client):
    scores = {f"c{i}": float(i) for i in range(2500)}
    assert last_seen.seed(scores) == 2500
    assert last_seen.seed({k: v + 0.5 if i % 2 else v - 0.5 for i, (k, v) in enumerate(scores.items())}) == 1250


def test_a_bad_score_at_the_end_of_a_large_call_writes_nothing(redis_client):
    args = ["1"]
    for i in range(1500):
        args += [str(i), f"m{i}"]
    args += ["oops", "m-last"]
    with pytest.raises(Exception, match="not a number"):
        part = store.partitions()[0]
        store.ZADD_UNLESS_SMALLER(redis_client, [part.seen, part.dirty, part.tombstones], args)
    assert stored(redis_client) == stored(redis_client, "dirty") == {}
