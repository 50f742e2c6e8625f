"""Garbage-collection pauses in the web server's workers under load, with and without the freeze after
a worker's first requests (``python -m bench.gc_pauses``).

``project/asgi.py`` has each worker collect once and freeze the survivors after its
``WEB_GC_FREEZE_AFTER``-th request, so later full collections no longer walk Django's long-lived
objects. Each round starts the service as ``bench.http`` does (4 workers, a private redis-server,
SQLite) once with ``WEB_GC_FREEZE_AFTER=0`` (the collector left alone) and once with the default,
and loads it with wrk on the tracked page as an anonymous visitor (32 connections): a warm-up run
(three short runs: each spreads its new connections anew over the workers, so most pass their
100th request in it), then the measured run. A probe in each worker
(``bench/gc_probe.py``: the same application plus ``gc.callbacks``) records every collection;
those that started during the measured run are counted. Writes ``bench/results/gc_pauses.json``
and ``.md``, which docs/benchmarks.md includes. Needs Debian's ``wrk``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import harness
from bench.web import BROWSER, PAGE_PATH, Case, configure, granian_server, prepare_database, run_wrk, visitor_cookie
from project.redis_server import PrivateRedis

WORKERS = 4
VARIANTS = {"alone": "0", "frozen": ""}  # WEB_GC_FREEZE_AFTER: 0, then the settings' default
WARM_UP_RUNS = 3  # of 2 s: most workers pass their 100th request in it
TITLES = {
    "alone": "collector left alone (WEB_GC_FREEZE_AFTER=0)",
    "frozen": "frozen at boot and after 100 requests (default)",
}


def one_run(variant: str, tmp: Path, seconds: int, connections: int) -> dict[str, Any]:
    """Start the service, warm it up, load it for ``seconds``; its workers' collections in that time."""
    probes = tmp / f"probe-{variant}-{time.monotonic_ns()}"
    probes.mkdir()
    os.environ.update({"WEB_GC_FREEZE_AFTER": VARIANTS[variant], "GC_PROBE_DIR": str(probes)})
    server = granian_server(variant, WORKERS, "bench.gc_probe:application")
    server.start(tmp / f"{variant}.log")
    try:
        page = Case("page", "tracked page", server.base + PAGE_PATH, {"Cookie": visitor_cookie(server.base), **BROWSER})
        for _ in range(WARM_UP_RUNS):  # each run's new connections spread anew over the workers
            run_wrk(page, 2, connections)
        began = time.time()
        sample = run_wrk(page, seconds, connections)
        ended = time.time()
    finally:
        server.stop()
    found = [json.loads(path.read_text()) for path in probes.glob("*.json")]
    during = [
        (gen, pause)
        for worker in found
        for gen, start, pause in worker["collections"]
        if began <= start <= ended and not freezing(worker["freezes"], start)
    ]
    return {
        "workers_reporting": len(found),
        "seconds": ended - began,
        "rate": sample.rate,
        "p50_ms": sample.p50_ms,
        "p99_ms": sample.p99_ms,
        "full_pauses_ms": [pause for gen, pause in during if gen == 2],
        "collections": len(during),
        "collecting_ms": sum(pause for _, pause in during),
        "longest_ms": max((pause for _, pause in during), default=0.0),
        # Each worker's collect-and-freezes, wherever they fell: at boot, then at its Nth request.
        "boot_freezes_ms": [worker["freezes"][0][1] for worker in found if worker["freezes"]],
        "request_freezes_ms": [worker["freezes"][1][1] for worker in found if len(worker["freezes"]) > 1],
    }


def freezing(freezes: list[list[float]], start: float) -> bool:
    """Whether a collection starting at ``start`` is a collect-and-freeze's own (counted apart)."""
    return any(began <= start <= began + ms / 1000 for began, ms in freezes)


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    full = [pause for run in runs for pause in run["full_pauses_ms"]]
    seconds = sum(run["seconds"] for run in runs)
    return {
        "full_collections": len(full),
        "boot_freeze_max_ms": max((ms for run in runs for ms in run["boot_freezes_ms"]), default=0.0),
        "request_freeze_max_ms": max((ms for run in runs for ms in run["request_freezes_ms"]), default=0.0),
        "full_per_minute": len(full) / seconds * 60,
        "full_max_ms": max(full, default=0.0),
        "full_median_ms": statistics.median(full) if full else 0.0,
        "any_max_ms": max(run["longest_ms"] for run in runs),
        "collecting_ms_per_s": sum(run["collecting_ms"] for run in runs) / seconds,
        "rate": statistics.median(run["rate"] for run in runs),
        "p50_ms": statistics.median(run["p50_ms"] for run in runs),
        "p99_ms": statistics.median(run["p99_ms"] for run in runs),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20, help="per measured run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is missing: apt-get install wrk")
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="activity-gc-bench-") as name, PrivateRedis() as redis_server:
        tmp = Path(name)
        configure(tmp, redis_server.url)
        prepare_database()
        for _ in range(args.rounds):
            for variant in VARIANTS:
                runs[variant].append(one_run(variant, tmp, args.seconds, args.connections))
    found = {variant: summary(variant_runs) for variant, variant_runs in runs.items()}
    rows = [
        ("full collections during the load", "full_collections", 0),
        (f"full collections per minute ({WORKERS} workers)", "full_per_minute", 1),
        ("longest full collection, ms", "full_max_ms", 1),
        ("median full collection, ms", "full_median_ms", 1),
        ("longest collection of any generation, ms", "any_max_ms", 1),
        ("time collecting, ms per s of load (all workers)", "collecting_ms_per_s", 1),
        ("once per worker: collect-and-freeze at boot, longest ms", "boot_freeze_max_ms", 1),
        ("once per worker: collect-and-freeze at its 100th request, longest ms", "request_freeze_max_ms", 1),
        ("req/s (median of rounds)", "rate", 0),
        ("p50 ms", "p50_ms", 1),
        ("p99 ms", "p99_ms", 1),
    ]
    table = [["measure", *(TITLES[variant] for variant in VARIANTS)]]
    table += [[label, *(f"{found[variant][key]:,.{digits}f}" for variant in VARIANTS)] for label, key, digits in rows]
    notes = (
        f"granian as `make run` starts it ({WORKERS} workers, DEBUG off, SQLite, private redis-server); "
        f"wrk with {args.connections} connections on the tracked page as an anonymous visitor, {args.rounds} rounds "
        f"of a warm-up ({WARM_UP_RUNS} runs of 2 s) and a {args.seconds} s measured run per variant, the variants "
        "alternating. Collections recorded in each worker by `gc.callbacks` (`bench/gc_probe.py`); only "
        "those starting during the measured runs count, apart from the collect-and-freezes' own (each worker's two, "
        "wherever they fell, are given apart). Command: `python -m bench.gc_pauses`."
    )
    harness.write("gc_pauses", {"seconds": args.seconds, "rounds": args.rounds, "variants": found}, table, notes)


if __name__ == "__main__":
    main()
