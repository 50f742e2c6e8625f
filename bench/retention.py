"""Retention tables at a million users (issue 37): build times, the longest Redis command, memory,
and what the first-active bitmap costs the write path.

On a private redis-server, the bench writes the bitmaps a million users (integer ids 1..N) leave
over the retention windows straight into the service's keys (``activity.store.keys``): each user's
first day (random over the cohort bitmaps' retention) in the first-day field and its day's
first-active bitmap, the active-user bitmaps of every day, week and month in retention (random
bytes, half the users a day), and a moved bitmap for every day with a few users at random ids, so
each is as long as the id space (the worst case: in production they are rare or absent). Then, side
by side in one run:

1. ``retention.build`` of a 30 x 30 daily table and a 26 x 26 weekly one (the service's code, the
   cache left out), each timed a few times, with SLOWLOG logging every command and a probe process
   PINGing every millisecond on its own connection;
2. MEMORY USAGE per user and day of the active and the cohort bitmaps, and of the first-day field;
3. ``ingest.record_events`` (500 events of distinct users with a page path, each a user's first
   event of its day) with the first-active call against the same path without it, in paired
   rounds, for returning users and for new ones; and the call alone against the whole batch.

    python -m bench.retention [--users 1000000] [--rounds 61]

Writes bench/results/retention.{json,md}.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import tempfile
import time
from array import array
from datetime import date, timedelta
from typing import Any

import redis

from bench import harness

BATCH = 500  # events per record_events call
BUILDS = 3  # timed builds of each table
FORK = multiprocessing.get_context("fork")
BENCH_OWN = ("slowlog", "config", "memory", "info", "ping")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000, help="user ids 1..N")
    parser.add_argument("--rounds", type=int, default=61, help="paired rounds of the write path")
    args = parser.parse_args()
    started = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="bench-retention-")
    os.environ["DATABASE_URL"] = f"sqlite:///{workdir}/db.sqlite3"  # the rollup's cells live here
    os.environ["ACTIVITY_REDIS_TIMEOUT"] = "30"
    server = harness.start("bench:")
    try:
        run(args, server.url, started)
    finally:
        server.stop()


def run(args: argparse.Namespace, url: str, started: float) -> None:
    from django.core.management import call_command

    from activity import calendar, clock

    call_command("migrate", verbosity=0)
    now = clock.now()
    clock.now = lambda: now  # one day, week and month for the whole run
    raw = redis.Redis.from_url(url, socket_timeout=None)
    seeding = time.monotonic()
    firsts = seed(raw, args.users, calendar.day_of(now))
    seed_s = time.monotonic() - seeding
    print(f"seeded {args.users:,} users' bitmaps in {seed_s:.1f} s")
    builds = {name: measure_build(raw, url, query) for name, query in tables().items()}
    memory = memory_per_user(raw, args.users, calendar.day_of(now))
    writes = write_path(args.users, args.rounds, firsts)
    sizes = {
        "users": args.users,
        "seed_s": round(seed_s, 1),
        "run_s": round(time.monotonic() - started, 1),
        "used_memory_mb": round(raw.info("memory")["used_memory"] / 2**20, 1),
    }
    report(sizes, builds, memory, writes)


def tables() -> dict[str, Any]:
    from activity.services import retention

    return {
        "daily 30 x 30": retention.Query(period="day", cohorts=30, periods=30),
        "weekly 26 x 26": retention.Query(period="week", cohorts=26, periods=26),
    }


# --- seeding ------------------------------------------------------------------------------------


def _bitmap(width: int) -> bytearray:
    return bytearray(width)


def seed(raw: redis.Redis, users: int, today: date) -> dict[int, date]:
    """Write the retention windows' bitmaps of ``users`` users; returns each user's first day."""
    from activity import calendar
    from activity.store import keys

    rng = random.Random(37)
    width = users // 8 + 1
    cohort_days = [today - timedelta(days=n) for n in range(keys.COHORT_KEEP_DAYS + 1)]
    first_bits = {day: _bitmap(width) for day in cohort_days}
    field = array("H", bytes(2 * (users + 1)))
    firsts: dict[int, date] = {}
    for user in range(1, users + 1):
        day = cohort_days[rng.randrange(len(cohort_days))]
        first_bits[day][user >> 3] |= 0x80 >> (user & 7)
        field[user] = calendar.day_number(day)
        firsts[user] = day
    if field.itemsize == 2 and array("H", [1]).tobytes() == b"\x01\x00":
        field.byteswap()  # BITFIELD u16 is big-endian
    pipe = raw.pipeline(transaction=False)
    pipe.set(keys.first_day(), field.tobytes())
    for day, bits in first_bits.items():
        pipe.set(keys.first_active(calendar.day_name(day)), bytes(bits))
        moved = _bitmap(width)
        for user in [users, *rng.sample(range(1, users), 20)]:
            moved[user >> 3] |= 0x80 >> (user & 7)
        pipe.set(keys.first_moved(calendar.day_name(day)), bytes(moved))
        if len(pipe) >= 40:
            pipe.execute()
    active_days = [today - timedelta(days=n) for n in range(keys.KEEP_DAYS + 1)]
    weeks = {calendar.week_name(day - timedelta(days=7 * n)) for day in (today,) for n in range(7)}
    months = {calendar.month_name(day) for day in active_days}
    for day in active_days:
        pipe.set(keys.active_bits(calendar.day_name(day)), rng.randbytes(width))
    for week in weeks:
        pipe.set(keys.active_bits_week(week), rng.randbytes(width))
    for month in months:
        pipe.set(keys.active_bits_month(month), rng.randbytes(width))
    pipe.execute()
    return firsts


# --- the builds -----------------------------------------------------------------------------------


def probe(url: str, stop: Any, out: Any) -> None:
    """PING every millisecond on a connection of its own until ``stop``; send back the latencies (s)."""
    client = redis.Redis.from_url(url)
    client.ping()
    latencies = []
    while not stop.is_set():
        sent = time.perf_counter()
        client.ping()
        latencies.append(time.perf_counter() - sent)
        time.sleep(max(0.0, 0.001 - (time.perf_counter() - sent)))
    out.put(latencies)


def _name(command: list[bytes]) -> str:
    name = command[0].decode().lower()
    return f"{name} {command[1].decode()}" if name == "bitop" and len(command) > 1 else name


def measure_build(raw: redis.Redis, url: str, query: Any) -> dict[str, Any]:
    """Build the table ``BUILDS`` times: each build's seconds, and over all of them the slowest
    command SLOWLOG saw, the commands run, and the probe's PING latencies."""
    from activity import clock
    from activity.services import retention

    raw.config_set("slowlog-log-slower-than", 0)
    raw.config_set("slowlog-max-len", 1_000_000)
    raw.slowlog_reset()
    stop, out = FORK.Event(), FORK.Queue()
    prober = FORK.Process(target=probe, args=(url, stop, out))
    prober.start()
    time.sleep(0.2)
    seconds = [harness.timed(lambda: retention.build(query, clock.now())) for _ in range(BUILDS)]
    stop.set()
    latencies = out.get()
    prober.join()
    entries = raw.slowlog_get(1_000_000)
    raw.config_set("slowlog-log-slower-than", 10_000)
    own = [(entry["duration"], _name(entry["command"].split(b" "))) for entry in entries]
    own = [(us, name) for us, name in own if name.split(" ")[0] not in BENCH_OWN]
    slowest = max(own)
    durations = sorted(us for us, _ in own)
    return {
        "build_s": [round(s, 3) for s in seconds],
        "build_median_s": round(statistics.median(seconds), 3),
        "commands_per_build": len(own) // BUILDS,
        "slowest_command_us": slowest[0],
        "slowest_command": slowest[1],
        "command_p99_us": durations[int(len(durations) * 0.99) - 1],
        "probe_pings": len(latencies),
        "probe_p99_ms": round(harness.percentile(latencies, 99) * 1000, 2),
        "probe_max_ms": round(max(latencies) * 1000, 2),
    }


# --- memory ------------------------------------------------------------------------------------


def memory_per_user(raw: redis.Redis, users: int, today: date) -> dict[str, float]:
    """Bytes per user and day of the active bitmaps (a day's, plus its share of a week's and a
    month's) and of the cohort bitmaps (a day's first-active and moved), and per user of the
    first-day field."""
    from activity import calendar
    from activity.store import keys

    yesterday = calendar.day_name(today - timedelta(days=1))

    def usage(key: str) -> int:
        return int(raw.memory_usage(key, samples=0) or 0)

    active = usage(keys.active_bits(yesterday))
    active += usage(keys.active_bits_week(calendar.week_name(today))) / 7
    active += usage(keys.active_bits_month(calendar.month_name(today))) / 30
    cohort = usage(keys.first_active(yesterday)) + usage(keys.first_moved(yesterday))
    return {
        "active_bitmaps_per_user_day_bytes": round(active / users, 3),
        "cohort_bitmaps_per_user_day_bytes": round(cohort / users, 3),
        "cohort_bitmaps_days_kept": keys.COHORT_KEEP_DAYS + 1,
        "active_day_bitmaps_days_kept": keys.KEEP_DAYS + 1,
        "first_day_field_per_user_bytes": round(usage(keys.first_day()) / users, 3),
    }


# --- the write path ----------------------------------------------------------------------------


def write_path(users: int, rounds: int, firsts: dict[int, date]) -> dict[str, Any]:
    """``record_events`` with the first-active call against without it (its function replaced by a
    no-op for that variant), in paired rounds: each round times both on batches of the same kind
    (distinct users, events built beforehand), in alternating order, and keeps their ratio; the
    result is the median ratio and a 90% interval of it. For returning users (a first day stored:
    the script reads it) and new ones (ids past N: it writes)."""
    from activity import clock
    from activity.events import Event
    from activity.services import ingest
    from activity.store import retention as retention_store

    real = retention_store.queue_first_active
    rng = random.Random(5)
    fresh = iter(range(users + 1, users + 10_000_000))

    def batch(returning: bool) -> list[Event]:
        ids = rng.sample(range(1, users + 1), BATCH) if returning else [next(fresh) for _ in range(BATCH)]
        return [Event(str(user), clock.now(), f"/page/{user % 500}") for user in ids]

    def timed(events: list[Event], first_active: bool) -> float:
        ingest._days_written.clear()
        retention_store.queue_first_active = real if first_active else lambda *args, **kwargs: []
        try:
            return harness.timed(lambda: ingest.record_events(events))
        finally:
            retention_store.queue_first_active = real

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
    from activity.store import retention as retention_store
    from activity.store.client import get_client

    raw, rng = get_client(), random.Random(11)
    raw.config_set("slowlog-log-slower-than", 0)
    raw.config_set("slowlog-max-len", 1_000_000)
    raw.slowlog_reset()
    for _ in range(calls):
        ingest._days_written.clear()
        ingest.record_events(
            [Event(str(user), clock.now(), f"/page/{user % 500}") for user in rng.sample(range(1, users + 1), BATCH)]
        )
    entries = raw.slowlog_get(1_000_000)
    raw.config_set("slowlog-log-slower-than", 10_000)
    sha = retention_store.FIRST_ACTIVE.sha.encode()
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
    from activity.store import retention as retention_store
    from activity.store.client import get_client

    client, now, rng = get_client(), clock.now(), random.Random(9)
    users = sorted(rng.sample(sorted(firsts), BATCH))
    day = max(firsts.values())

    def call() -> None:
        pipe = client.pipeline(transaction=False)
        retention_store.queue_first_active(pipe, day, users, now)
        pipe.execute()

    def record() -> None:
        ingest._days_written.clear()
        ingest.record_events([Event(str(user), now, f"/page/{user % 500}") for user in users])

    times = {"call": [], "record": []}
    for _ in range(40):
        times["call"].append(harness.timed(call))
        times["record"].append(harness.timed(record))
    return {
        "first_active_call_ms": round(statistics.median(times["call"]) * 1000, 3),
        "record_events_ms": round(statistics.median(times["record"]) * 1000, 3),
    }


# --- the report --------------------------------------------------------------------------------


def report(sizes: dict[str, Any], builds: dict[str, dict[str, Any]], memory: dict[str, Any], writes: dict) -> None:
    table = [["measure", "target", *builds, "met"]]
    slowest = max(found["slowest_command_us"] for found in builds.values())
    table.append(["build, median of 3 (s)", "", *(f"{b['build_median_s']:.2f}" for b in builds.values()), ""])
    table.append(["Redis commands per build", "", *(f"{b['commands_per_build']:,}" for b in builds.values()), ""])
    table.append(
        [
            "slowest command (SLOWLOG) ms",
            "<= 5",
            *(f"{b['slowest_command_us'] / 1000:.2f} ({b['slowest_command']})" for b in builds.values()),
            "yes" if slowest <= 5000 else "NO",
        ]
    )
    table.append(["command p99 (SLOWLOG) ms", "", *(f"{b['command_p99_us'] / 1000:.3f}" for b in builds.values()), ""])
    table.append(
        ["probe PING p99 / max ms", "", *(f"{b['probe_p99_ms']} / {b['probe_max_ms']}" for b in builds.values()), ""]
    )
    m = memory
    notes = [
        f"{sizes['users']:,} users (ids 1..N); seeded in {sizes['seed_s']} s, whole run {sizes['run_s']} s, "
        f"Redis used {sizes['used_memory_mb']} MB. Every moved bitmap reaches the top id (the worst case).",
        "",
        "| memory | bytes |",
        "|---|---|",
        f"| active bitmaps per user per day (day, 1/7 week, 1/30 month) | {m['active_bitmaps_per_user_day_bytes']} |",
        f"| cohort bitmaps per user per day (first-active + moved) | {m['cohort_bitmaps_per_user_day_bytes']} |",
        f"| first-day field per user (kept while the user exists) | {m['first_day_field_per_user_bytes']} |",
        "",
        f"Cohort bitmaps are kept {m['cohort_bitmaps_days_kept']} days, the active day bitmaps "
        f"{m['active_day_bitmaps_days_kept']}.",
        "",
        "| write path: record_events of 500 events | with first-active (events/s) | without (events/s) "
        "| cost, median of paired rounds | 90% interval | target |",
        "|---|---|---|---|---|---|",
    ]
    for kind in ("returning", "new"):
        found = writes[kind]
        low, high = found["cost_interval_90"]
        notes.append(
            f"| {kind} users | {found['with_events_per_s']:,} | {found['without_events_per_s']:,} | "
            f"{found['cost_median']:+.1%} | {low:+.1%} .. {high:+.1%} | <= 5% |"
        )
    notes.append(
        f"\nThe first-active call alone (a pipeline of it, 500 returning users): {writes['first_active_call_ms']} ms, "
        f"against {writes['record_events_ms']} ms for the whole record_events of the same users "
        f"({writes['first_active_call_ms'] / writes['record_events_ms']:.1%}); medians of 40."
    )
    notes.append(
        f"\nRedis's own time per batch of 500 returning users (SLOWLOG): {writes['server_us_per_batch']} us, of "
        f"which the first-active call {writes['server_first_active_us_per_batch']} us "
        f"({writes['server_first_active_share']:.1%})."
    )
    results = {**sizes, "builds": builds, "memory": memory, "write_path": writes}
    harness.write("retention", results, table, "\n".join(notes))


if __name__ == "__main__":
    main()
