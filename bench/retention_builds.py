"""The retention bench's table builds (``bench.retention``): ``cohorts.build`` timed a few times
with SLOWLOG logging every command and a probe process PINGing every millisecond. Apart from the
seed it reads and the write path, which measures ingest rather than reads."""

from __future__ import annotations

import multiprocessing
import statistics
import time
from typing import Any

import redis

from bench import harness

BUILDS = 3  # timed builds of each table
FORK = multiprocessing.get_context("fork")
BENCH_OWN = ("slowlog", "config", "memory", "info", "ping")


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
    from activity.services import cohorts

    raw.config_set("slowlog-log-slower-than", 0)
    raw.config_set("slowlog-max-len", 1_000_000)
    raw.slowlog_reset()
    stop, out = FORK.Event(), FORK.Queue()
    prober = FORK.Process(target=probe, args=(url, stop, out))
    prober.start()
    time.sleep(0.2)
    seconds = [harness.timed(lambda: cohorts.build(query, clock.now())) for _ in range(BUILDS)]
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
