"""The retention bench's id shapes (``bench.retention``): people with ids 1..N against ids scattered
over 1..2^63, each run alone from an empty Redis through the write path's {au} calls. Apart from
the seed: each run empties Redis first, before the seed writes what the builds read."""

from __future__ import annotations

import random
import time
from typing import Any

import redis

ASSIGN_BATCH = 1000  # people per pipeline when the ids are compared


def ids_alone(raw: redis.Redis, shape: str, users: int, now: float) -> dict[str, Any]:
    """From an empty Redis, ``users`` people (``sequential``: ids 1..N; ``scattered``: distinct ids
    at random over 1..2^63) each active today through the write path's {au} calls: Redis's memory
    delta and the long-lived keys' bytes per person, the slowest command, and the day's count."""
    from activity import calendar
    from activity.store import audience, keys
    from activity.store.client import get_client

    raw.flushdb()  # the bench's own private server
    client, today, rng = get_client(), calendar.day_of(now), random.Random(63)
    if shape == "sequential":
        ids = list(range(1, users + 1))
    else:
        found: set[int] = set()
        while len(found) < users:
            found.add(rng.randrange(1, 2**63))
        ids = list(found)
    raw.config_set("slowlog-log-slower-than", 0)
    raw.config_set("slowlog-max-len", 1_000_000)
    raw.slowlog_reset()
    before = raw.info("memory")["used_memory"]  # with an empty SLOWLOG, as ``after`` is
    started = time.monotonic()
    for start in range(0, users, ASSIGN_BATCH):
        pipe = client.pipeline(transaction=False)
        audience.queue_actives(pipe, [(str(user), today) for user in ids[start : start + ASSIGN_BATCH]], now)
        pipe.execute()
    seconds = time.monotonic() - started
    entries = raw.slowlog_get(1_000_000)
    raw.config_set("slowlog-log-slower-than", 10_000)
    raw.slowlog_reset()
    delta = raw.info("memory")["used_memory"] - before
    # The script calls themselves (SLOWLOG also lists the commands they run): their durations are
    # Redis's wall time, so on a busy machine they include time the server waited for a CPU.
    calls = sorted(entry["duration"] for entry in entries if entry["command"].lower().startswith(b"evalsha"))
    kept = (keys.dense_ids(), keys.dense_ids_next(), keys.first_day())
    long_lived = sum(int(raw.memory_usage(key, samples=0) or 0) for key in kept)
    bitmaps = [
        build(calendar.name_of(period, today)) for build, period in zip(audience.BITS, calendar.PERIODS, strict=True)
    ]
    dated = sum(
        int(raw.memory_usage(key, samples=0) or 0) for key in (*bitmaps, keys.first_active(calendar.day_name(today)))
    )
    return {
        "seconds": round(seconds, 1),
        "used_memory_per_person_bytes": round(delta / users, 1),
        "long_lived_per_person_bytes": round(long_lived / users, 1),
        "keys_per_person_bytes": round((long_lived + dated) / users, 1),
        "map_encoding": raw.object("encoding", keys.dense_ids()).decode(),
        "script_calls": len(calls),
        "script_median_us": calls[len(calls) // 2],
        "script_p99_us": calls[int(len(calls) * 0.99) - 1],
        "slowest_command_us": calls[-1],
        "active_today": raw.bitcount(keys.active_bits(calendar.day_name(today))),
    }
