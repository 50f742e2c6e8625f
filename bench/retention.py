"""Retention tables at a million people: what any id shape costs, build times, the longest Redis
command, memory, and what the first-active bitmap costs the write path.

On a private redis-server, first the ids side by side: N people with ids 1..N and N people with
ids scattered over 1..2^63, each run alone from an empty Redis through the write path's {au} calls
(``audience.queue_actives``: the dense id map's assignment, the active-user bitmaps, the first
days), 1,000 people a pipeline; Redis's memory delta, the long-lived keys' MEMORY USAGE, and the
slowest command (SLOWLOG) of each, and their ratio. Then the bench writes the bitmaps a million
people (dense ids 1..N, as the map of the last run assigned them) leave over the retention windows
straight into the service's keys (``activity.store.keys``): each person's
first day (random over the cohort bitmaps' retention) in the first-day field and its day's
first-active bitmap, the active-user bitmaps of every day, week and month in retention (random
bytes, half the users a day), and a moved bitmap for every day with a few users at random ids, so
each is as long as the id space (the worst case: in production they are rare or absent). Then, side
by side in one run:

1. ``cohorts.build`` of a 30 x 30 daily table and a 26 x 26 weekly one (the service's code, the
   cache left out), each timed a few times, with SLOWLOG logging every command and a probe process
   PINGing every millisecond on its own connection;
2. MEMORY USAGE per user and day of the active and the cohort bitmaps, and of the first-day field;
3. ``ingest.record_events`` (500 events of distinct users with a page path, each a user's first
   event of its day) with the first-active call against the same path without it, in paired
   rounds, for returning users and for new ones; and the call alone against the whole batch.

    python -m bench.retention [--users 1000000] [--rounds 61]
    python -m bench.retention --smoke    # 20,000 people, 3 rounds, in seconds; writes no results

Writes bench/results/retention.{json,md}.

The id shapes are in ``bench/retention_ids.py``, the seeded bitmaps and their memory in
``bench/retention_seed.py``, the builds in ``bench/retention_builds.py``, the write path in
``bench/retention_writes.py``; this module runs them and writes the table.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import redis

from bench import harness
from bench.retention_builds import measure_build
from bench.retention_ids import ASSIGN_BATCH, ids_alone
from bench.retention_seed import memory_per_user, seed
from bench.retention_writes import write_path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=1_000_000, help="user ids 1..N")
    parser.add_argument("--rounds", type=int, default=61, help="paired rounds of the write path")
    parser.add_argument("--smoke", action="store_true", help="20,000 people and 3 rounds; no results written")
    args = parser.parse_args()
    if args.smoke:
        args.users, args.rounds = 20_000, 3
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
    ids_alone(raw, "sequential", ASSIGN_BATCH, now)  # warm-up: the scripts loaded, the client's buffers grown
    ids = {shape: ids_alone(raw, shape, args.users, now) for shape in ("scattered", "sequential")}
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
        "load_average": round(os.getloadavg()[0], 1),  # of the machine the figures share
    }
    report(sizes, ids, builds, memory, writes, args.smoke)


def tables() -> dict[str, Any]:
    from activity.services import cohorts

    return {
        "daily 30 x 30": cohorts.Query(period="day", cohorts=30, periods=30),
        "weekly 26 x 26": cohorts.Query(period="week", cohorts=26, periods=26),
    }


# --- the report --------------------------------------------------------------------------------


def report(
    sizes: dict[str, Any],
    ids: dict[str, dict[str, Any]],
    builds: dict[str, dict[str, Any]],
    memory: dict[str, Any],
    writes: dict,
    smoke: bool,
) -> None:
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
    scattered, sequential = ids["scattered"], ids["sequential"]
    ratio = scattered["keys_per_person_bytes"] / sequential["keys_per_person_bytes"]
    used = scattered["used_memory_per_person_bytes"] / sequential["used_memory_per_person_bytes"]
    slowest_assign = max(found["slowest_command_us"] for found in ids.values())
    notes = [
        f"{sizes['users']:,} people, each run alone from an empty Redis through the write path's {{au}} calls "
        "(dense id, active-user bitmaps, first day), 1,000 a pipeline:",
        "",
        "| ids | Redis memory per person (bytes) | {au} keys per person (bytes) | of which long-lived | map encoding "
        "| script call median / p99 / max (ms) | counted today | seconds |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {shape} | {found['used_memory_per_person_bytes']} | {found['keys_per_person_bytes']} | "
            f"{found['long_lived_per_person_bytes']} | "
            f"{found['map_encoding']} | {found['script_median_us'] / 1000:.2f} / {found['script_p99_us'] / 1000:.2f}"
            f" / {found['slowest_command_us'] / 1000:.2f} | {found['active_today']:,} | {found['seconds']} |"
            for shape, found in (("1..N", sequential), ("scattered over 2^63", scattered))
        ),
        "",
        f"Scattered / sequential: {ratio:.3f} in the {{au}} keys' MEMORY USAGE (target: within 10%: "
        f"{'yes' if abs(ratio - 1) <= 0.10 else 'NO'}), {used:.3f} in Redis's used memory;"
        f" slowest script call {slowest_assign / 1000:.2f} ms"
        f" (target <= 5: {'yes' if slowest_assign <= 5000 else 'NO'};"
        f" load average {sizes['load_average']} on {os.cpu_count()} cores).",
        "",
        f"Then {sizes['users']:,} people (dense ids 1..N) over the retention windows; seeded in {sizes['seed_s']} s, "
        f"whole run {sizes['run_s']} s, Redis used {sizes['used_memory_mb']} MB. Every moved bitmap reaches the top "
        "id (the worst case).",
        "",
        "| memory | bytes |",
        "|---|---|",
        f"| active bitmaps per user per day (day, 1/7 week, 1/30 month) | {m['active_bitmaps_per_user_day_bytes']} |",
        f"| cohort bitmaps per user per day (first-active + moved) | {m['cohort_bitmaps_per_user_day_bytes']} |",
        f"| first-day field per person (kept while the person is) | {m['first_day_field_per_user_bytes']} |",
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
    if smoke:
        print("\n".join(notes))
        return
    ratios = {"scattered_over_sequential": round(ratio, 4), "used_memory_scattered_over_sequential": round(used, 4)}
    results = {**sizes, "ids": ids | ratios, "builds": builds}
    harness.write("retention", results | {"memory": memory, "write_path": writes}, table, "\n".join(notes))


if __name__ == "__main__":
    main()
