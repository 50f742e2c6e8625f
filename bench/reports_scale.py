"""Reports and audience figures at a million weekly viewers: what a probe client sees while they run.

The service promises that no Redis command's work grows with the number of users. This bench seeds N weekly
viewers (integer ids 1..N, so the active-user bitmaps hold ids up to N) through the real page-view
path, then, side by side in one run on one private redis-server:

1. phase "incremental": worker processes rebuild ``most-active`` (day and week), read pages of
   ``active-by-name`` across the index (first, random and last page) and ``audience.stats()``;
2. phase "full sort": the shapes the service ran before, against the same data: ``SORT <every
   viewer> BY uv:* DESC LIMIT 0 K GET ... STORE``, ``SORT <every viewer> BY name:* ALPHA GET ...
   STORE``, and BITOP OR / PFMERGE over 30 daily keys;

while a probe process PINGs every millisecond on its own connection. The incremental load takes
turns (1 s windows) with a control: a Lua loop of constant work (about 0.5 ms) once a millisecond,
so both meet the same noise of a shared machine, and what SLOWLOG gives that constant command
beyond its work is the machine's. Each load gets the probe's latency percentiles in its windows,
its slowest commands (SLOWLOG) and its costliest command on average (INFO commandstats).

Then MEMORY USAGE per viewer of the top viewers, the by-name index and the old viewer set. The
by-name entries the seed's page views leave pending are merged into the indexes as the service
merges them (a slice per call, ``reports.merge_pending``), each call timed (indexes growing from
empty to N), so a first view's deferred cost is seen where it went.

    python -m bench.reports_scale [--viewers 1000000] [--seconds 20] [--workers 2]

Writes bench/results/reports_scale.{json,md}.

The seed is in ``bench/reports_scale_seed.py``, the measured loads in ``bench/reports_scale_loads.py``,
the by-name merge in ``bench/reports_scale_merge.py``; this module runs them and writes the table.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from typing import Any

from bench import harness
from bench.reports_scale_loads import (
    FIXED_WORK_US,
    LOAD_NICE,
    SLOWLOG_FLOOR_US,
    SLOWLOG_LENGTH,
    WINDOW_S,
    calibrate,
    connect,
    control_worker,
    full_sort_worker,
    incremental_worker,
    phase,
    prefer,
)
from bench.reports_scale_merge import merge_pending
from bench.reports_scale_seed import drop_expired, memory_per_viewer, seed, seed_old_shapes

# The probe's rows of the table: percentile, result field, the target in ms (None: no target).
PROBE_ROWS = (
    ("p50", "probe_p50_ms", None),
    ("p99", "probe_p99_ms", None),
    ("p99.9", "probe_p99_9_ms", 5),
    ("max", "probe_max_ms", 20),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--viewers", type=int, default=1_000_000, help="weekly viewers (user ids 1..N)")
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds each load is measured")
    parser.add_argument("--workers", type=int, default=2, help="processes running each load")
    args = parser.parse_args()
    started = time.monotonic()
    os.environ["ACTIVITY_REDIS_TIMEOUT"] = "30"  # a seeding batch on a busy shared machine can pass 0.5 s
    server = harness.start("bench:")
    try:
        priority = prefer(server.process.pid)
        run(args, server.url, started, priority)
    finally:
        server.stop()


def run(args: argparse.Namespace, url: str, started: float, redis_nice: int) -> None:
    """Seed, measure the loads side by side, and write the results."""
    from activity import clock, conf

    # One day, week and month for the whole run, even across local midnight.
    now = clock.now()
    clock.now = lambda: now
    raw = connect(url, decode_responses=True)
    seeding = time.monotonic()
    page_views = seed(args.viewers, now)
    seed_s = time.monotonic() - seeding
    print(f"seeded {args.viewers:,} viewers through record_events in {seed_s:.0f} s")
    old_s = harness.timed(lambda: seed_old_shapes(raw, args.viewers, now))
    print(f"old shapes' input (29 more daily bitmaps and HLLs, viewer sets) in {old_s:.0f} s")
    merges = {"after the seed": merge_pending(raw, now)}
    memory = memory_per_viewer(raw, args.viewers, now)
    # The seed wrote a week's session lists in minutes; let them expire (in production they expire
    # a week's worth over a week) and drop them, so the phases do not measure that burst of deletions.
    time.sleep(max(0.0, seeding + seed_s + conf.settings.SESSION_WINDOW + 5 - time.monotonic()))
    dropped = drop_expired(raw)
    print(f"{dropped:,} keys past their TTL dropped before the loads")
    raw.config_set("slowlog-log-slower-than", SLOWLOG_FLOOR_US)
    raw.config_set("slowlog-max-len", SLOWLOG_LENGTH)
    iterations = calibrate(raw)
    loads = {
        "incremental": functools.partial(incremental_worker, args.viewers),
        "control": functools.partial(control_worker, iterations),
    }
    phases = phase(url, args, loads)
    phases |= phase(url, args, {"full_sort": full_sort_worker})
    sizes = {
        "viewers": args.viewers,
        "page_views": page_views,
        "seconds_per_phase": args.seconds,
        "workers": args.workers,
        "redis_and_probe_nice": redis_nice,
        "seed_s": round(seed_s, 1),
        "expired_dropped": dropped,
        "old_shapes_seed_s": round(old_s, 1),
        "run_s": round(time.monotonic() - started, 1),
        "used_memory_mb": round(raw.info("memory")["used_memory"] / 2**20, 1),
    }
    report(sizes, phases, memory, merges)


# --- the table --------------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def _slowest(result: dict[str, Any]) -> str:
    if not result["slowest"]:
        return f"under {SLOWLOG_FLOOR_US // 1000}"
    duration, command = result["slowest"][0]
    return f"{_ms(duration / 1000)} ({command})"


def _met(ok: bool) -> str:
    return "yes" if ok else "no"


def report(
    sizes: dict[str, Any],
    phases: dict[str, Any],
    memory: dict[str, float],
    merges: dict[str, dict[str, Any]],
) -> None:
    """The issue's targets next to the measurements: bench/results/reports_scale.{json,md}."""
    now, control, before = (phases[name] for name in ("incremental", "control", "full_sort"))
    columns = (now, control, before)
    control_name = f"control: a fixed {FIXED_WORK_US} us command"
    table = [["measure", "target", "now: incremental", control_name, "before: full sort", "met"]]
    for label, metric, limit in PROBE_ROWS:
        target, ok = ("", "") if limit is None else (f"<= {limit}", _met(now[metric] <= limit))
        table.append([f"probe PING {label} ms", target, *(_ms(phase[metric]) for phase in columns), ok])
    stalled = [f"{phase['stalled_share']:.1%}" for phase in columns]
    table.append(["share of the phase in PINGs slower than 5 ms", "", *stalled, ""])
    slowest_now = now["slowest"][0][0] if now["slowest"] else 0
    table.append(["slowest command (SLOWLOG) ms", "<= 5", *map(_slowest, columns), _met(slowest_now <= 5000)])
    table.append(["commands over 5 ms (SLOWLOG)", "", *(f"{phase['slowlog_over_5ms']:,}" for phase in columns), ""])
    costliest = [f"{_ms(us / 1000)} ({name})" for us, name in (phase["costliest_mean_us"][0] for phase in columns)]
    table.append(["costliest command on average (commandstats), ms per call", "", *costliest, ""])
    for when, merge in merges.items():
        table.append(
            [
                f"by-name merge {when}, Redis us per merged entry ({merge['entries']:,} entries in "
                f"{merge['calls']:,} calls of up to {merge['slice']}, into indexes of up to "
                f"{merge['index_members']:,})",
                "",
                f"{merge['us_per_entry']:.1f} (call: median {_ms(merge['median_call_us'] / 1000)} ms, p99 "
                f"{_ms(merge['p99_call_us'] / 1000)} ms, slowest {_ms(merge['slowest_call_us'] / 1000)} ms)",
                "",
                "",
                "",
            ]
        )
    table.append(
        [
            "memory per weekly viewer, bytes (week keys; the day's add as much)",
            "",
            f"{memory['new_bytes']:.0f} (by-name index {memory['by_name_bytes']:.0f} + top viewers "
            f"{memory['top_viewers_bytes']:.2f}: {memory['top_viewers_members']:,} users, "
            f"{memory['top_viewers_total_bytes'] / 1024:,.0f} KiB in all)",
            "",
            f"{memory['old_viewer_set_bytes']:.0f} (viewer set)",
            "",
        ]
    )
    operations = "; ".join(
        f"{name}: " + ", ".join(f"{count:,} {op}" for op, count in phases[name]["operations"].items())
        for name in ("incremental", "control", "full_sort")
    )
    notes = (
        f"{sizes['viewers']:,} weekly viewers (integer ids 1..N, usernames known, {sizes['page_views']:,} page views), "
        f"seeded through `ingest.record_events` in {sizes['seed_s']:.0f} s; their session lists, past their window, "
        f"dropped before the loads ({sizes['expired_dropped']:,} keys, one SCAN). {sizes['seconds_per_phase']:.0f} s "
        f"per load, {sizes['workers']} load processes at nice {LOAD_NICE} and a probe process PINGing every ms on its "
        f"own connection (redis-server and probe at nice {sizes['redis_and_probe_nice']}); SLOWLOG keeps commands "
        f"over {SLOWLOG_FLOOR_US} us. The incremental load and the control take turns in {WINDOW_S:.0f} s windows, "
        f"so both meet the shared machine's noise; the control's command is a Lua loop of constant work "
        f"({FIXED_WORK_US} us), called once a ms per process, so what SLOWLOG and the probe show beyond that is the "
        f"machine's. Done: {operations}. "
        "By-name merge: the pending entries of the day and the week moved into their indexes by "
        "`reports.merge_pending`, one slice per call, each call's Redis time from INFO commandstats; a pending entry "
        f"takes {merges['after the seed']['pending_bytes_per_entry']:.0f} bytes until merged. "
        f"Whole run {sizes['run_s'] / 60:.0f} min. "
        f"Command: `python -m bench.reports_scale --viewers {sizes['viewers']}`."
    )
    harness.write(
        "reports_scale",
        {
            "sizes": sizes,
            "phases": phases,
            "by_name_merge": merges,
            "memory_per_viewer": memory,
        },
        table,
        notes,
    )


if __name__ == "__main__":
    main()
