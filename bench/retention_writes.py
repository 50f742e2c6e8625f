"""The retention bench's write path (``bench.retention``): what the first-active call costs
``record_events``, in paired rounds with and without it, alone in a pipeline, and in Redis's own
time. Apart from the builds: this measures ingest on the seeded first days, not the reads."""

from __future__ import annotations

import random
import statistics
from datetime import date
from typing import Any

from bench import harness

BATCH = 500  # events per record_events call


def write_path(users: int, rounds: int, firsts: dict[int, date]) -> dict[str, Any]:
    """``record_events`` with the first-active call against without it (its function replaced by a
    no-op for that variant), in paired rounds: each round times both on batches of the same kind
    (distinct users, events built beforehand), in alternating order, and keeps their ratio; the
    result is the median ratio and a 90% interval of it. For returning users (a first day stored:
    the script reads it) and new ones (ids past N: it writes)."""
    from activity import clock
    from activity.events import Event
    from activity.services import ingest
    from activity.store import cohorts as cohort_store

    real = cohort_store.queue_first_active
    rng = random.Random(5)
    fresh = iter(range(users + 1, users + 10_000_000))

    def batch(returning: bool) -> list[Event]:
        ids = rng.sample(range(1, users + 1), BATCH) if returning else [next(fresh) for _ in range(BATCH)]
        return [Event(str(user), clock.now(), f"/page/{user % 500}") for user in ids]

    def timed(events: list[Event], first_active: bool) -> float:
        cohort_store.queue_first_active = real if first_active else lambda *args, **kwargs: []
        try:
            return harness.timed(lambda: ingest.record_events(events))
        finally:
            cohort_store.queue_first_active = real

    found: dict[str, Any] = {}
    for kind, returning in (("returning", True), ("new", False)):
        timed(batch(returning), True), timed(batch(returning), False)  # warm-up
        ratios, with_s, without_s = [], [], []
        for n in range(rounds):
            order = (True, False) if n % 2 == 0 else (False, True)
            seconds = {first_active: timed(batch(returning), first_active) for first_active in order}
            ratios.append(seconds[True] / seconds[False])
            with_s.append(seconds[True])
            without_s.append(seconds[False])
        low, high = harness.median_interval(ratios)
        found[kind] = {
            "with_events_per_s": round(BATCH / statistics.median(with_s)),
            "without_events_per_s": round(BATCH / statistics.median(without_s)),
            "cost_median": round(statistics.median(ratios) - 1, 4),
            "cost_interval_90": [round(low - 1, 4), round(high - 1, 4)],
        }
    return found | script_alone(firsts) | server_share(users)


def server_share(users: int, calls: int = 20) -> dict[str, float]:
    """Redis's own time (SLOWLOG logging every command) in ``calls`` record_events of 500 returning
    users: all of it, and the first-active calls' part. Unlike wall time on a shared machine, what
    the server spends does not depend on what the neighbours do."""
    from activity import clock
    from activity.events import Event
    from activity.services import ingest
    from activity.store import cohorts as cohort_store
    from activity.store.client import get_client

    raw, rng = get_client(), random.Random(11)
    raw.config_set("slowlog-log-slower-than", 0)
    raw.config_set("slowlog-max-len", 1_000_000)
    raw.slowlog_reset()
    for _ in range(calls):
        ingest.record_events(
            [Event(str(user), clock.now(), f"/page/{user % 500}") for user in rng.sample(range(1, users + 1), BATCH)]
        )
    entries = raw.slowlog_get(1_000_000)
    raw.config_set("slowlog-log-slower-than", 10_000)
    sha = cohort_store.FIRST_ACTIVE.sha.encode()
    own = [entry for entry in entries if not entry["command"].lower().startswith((b"slowlog", b"config"))]
    total = sum(entry["duration"] for entry in own)
    first_active = sum(entry["duration"] for entry in own if sha in entry["command"][:64])
    return {
        "server_us_per_batch": round(total / calls),
        "server_first_active_us_per_batch": round(first_active / calls),
        "server_first_active_share": round(first_active / total, 4),
    }


def script_alone(firsts: dict[int, date]) -> dict[str, float]:
    """Milliseconds of one pipeline holding only the first-active call for 500 returning users, and
    of one ``record_events`` of them: the call's share measured directly, less noisy than a ratio of
    two rates on a shared machine."""
    from activity import clock
    from activity.events import Event
    from activity.services import ingest
    from activity.store import cohorts as cohort_store
    from activity.store import people
    from activity.store.client import get_client

    client, now, rng = get_client(), clock.now(), random.Random(9)
    users = sorted(rng.sample(sorted(firsts), BATCH))
    digests = sorted(people.digest(str(user)) for user in users)
    day = max(firsts.values())

    def call() -> None:
        pipe = client.pipeline(transaction=False)
        cohort_store.queue_first_active(pipe, day, digests, now)
        pipe.execute()

    def record() -> None:
        ingest.record_events([Event(str(user), now, f"/page/{user % 500}") for user in users])

    times = {"call": [], "record": []}
    for _ in range(40):
        times["call"].append(harness.timed(call))
        times["record"].append(harness.timed(record))
    return {
        "first_active_call_ms": round(statistics.median(times["call"]) * 1000, 3),
        "record_events_ms": round(statistics.median(times["record"]) * 1000, 3),
    }
