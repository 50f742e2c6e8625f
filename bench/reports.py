"""Cached reports under load: the rebuild lock versus a naive cache, side by side in one run.

50 reader threads read one report for a few seconds while its 1 s TTL keeps expiring. With the
lock, one reader rebuilds and the others serve the stale copy; with the naive cache every reader
that finds the copy stale runs SORT itself. Printed and written to bench/results/reports.{json,md}:
SORT calls, reader p50/p99 latency, and Redis CPU (INFO cpu) per 1,000 reads.

    python -m bench.reports [--users 20000] [--readers 50] [--seconds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

from bench import harness
from project.redis_server import PrivateRedis


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20000)
    parser.add_argument("--readers", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    with PrivateRedis() as server:
        os.environ["REDIS_URL"] = server.url
        os.environ["ACTIVITY_KEY_PREFIX"] = "actbench:"
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
        import django

        django.setup()
        run(args)


def run(args: argparse.Namespace) -> None:
    from django.test import override_settings

    from activity import clock
    from activity.events import Event
    from activity.services import ingest, reports
    from activity.store.client import get_client

    client = get_client()
    now = clock.now()
    for start in range(0, args.users, 500):
        users = range(start, min(start + 500, args.users))
        ingest.record_events([Event(f"u{i}", now, f"/p{n}") for i in users for n in range(i % 5 + 1)])
    report = reports.REGISTRY["most-active"]

    def naive_read():
        policy, at = reports.Policy.current(), clock.now()
        found = reports.read_copy(report, "day", at, 1, 50, policy)
        if found is None or not found.fresh:
            reports.build_copy(report, "day", at, policy)  # every reader that misses runs SORT
            found = reports.read_copy(report, "day", at, 1, 50, policy)
        return found

    def locked_read():
        return reports.page("most-active", "day", 1, 50)[0]

    def measure(read) -> dict[str, float]:
        read()  # a copy exists before the load starts, as in steady state
        latencies: list[float] = []
        lock = threading.Lock()
        barrier = threading.Barrier(args.readers)

        def reader() -> None:
            barrier.wait()
            mine = []
            end = time.monotonic() + args.seconds
            while time.monotonic() < end:
                started = time.perf_counter()
                read()
                mine.append(time.perf_counter() - started)
                time.sleep(0.005)
            with lock:
                latencies.extend(mine)

        sorts_before = client.info("commandstats").get("cmdstat_sort", {}).get("calls", 0)
        cpu = client.info("cpu")
        cpu_before = cpu["used_cpu_sys"] + cpu["used_cpu_user"]
        threads = [threading.Thread(target=reader) for _ in range(args.readers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cpu = client.info("cpu")
        cpu_used = cpu["used_cpu_sys"] + cpu["used_cpu_user"] - cpu_before
        sorts = client.info("commandstats").get("cmdstat_sort", {}).get("calls", 0) - sorts_before
        quantiles = statistics.quantiles(latencies, n=100)
        return {
            "reads": len(latencies),
            "sort_calls": sorts,
            "sort_per_1000_reads": round(1000 * sorts / len(latencies), 2),
            "p50_ms": round(quantiles[49] * 1000, 3),
            "p99_ms": round(quantiles[98] * 1000, 3),
            "redis_cpu_ms_per_1000_reads": round(1000 * 1000 * cpu_used / len(latencies), 2),
        }

    reports.STALE_S = 5
    with override_settings(ACTIVITY_REPORT_TTL=1):
        results = {"naive": measure(naive_read), "lock": measure(locked_read)}
    ratios = {
        metric: round(results["naive"][metric] / results["lock"][metric], 2) if results["lock"][metric] else None
        for metric in ("sort_per_1000_reads", "p50_ms", "p99_ms", "redis_cpu_ms_per_1000_reads")
    }
    sizes = {"users": args.users, "readers": args.readers, "seconds": args.seconds, "ttl_s": 1, "stale_s": 5}
    write(sizes, results, ratios)


def write(sizes: dict, results: dict, ratios: dict) -> None:
    harness.RESULTS.mkdir(exist_ok=True)
    payload = {"sizes": sizes, "results": results, "naive_over_lock": ratios}
    (harness.RESULTS / "reports.json").write_text(json.dumps(payload, indent=2) + "\n")
    metrics = ["reads", "sort_calls", "sort_per_1000_reads", "p50_ms", "p99_ms", "redis_cpu_ms_per_1000_reads"]
    lines = [
        f"Sizes: {sizes['users']} users, {sizes['readers']} reader threads for {sizes['seconds']} s each, "
        f"report TTL {sizes['ttl_s']} s, stale copy kept {sizes['stale_s']} s more.",
        "",
        "| metric | naive cache | rebuild lock | naive / lock |",
        "|---|---|---|---|",
    ]
    for metric in metrics:
        ratio = ratios.get(metric, "")
        lines.append(f"| {metric} | {results['naive'][metric]} | {results['lock'][metric]} | {ratio} |")
    table = "\n".join(lines) + "\n"
    (harness.RESULTS / "reports.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
