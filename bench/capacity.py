"""Figures for the capacity model (docs/capacity.md): bytes per user and visitor in each structure,
Redis CPU per event of the whole ingest path, and the same ingest on one server and on a 3-master
cluster side by side.

A private redis-server (one shard) takes ``--users`` users, each with one page view and one visit
today through ``ingest.record_events`` in batches of 1,000 (the API's and the Celery task's path):
MEMORY USAGE (exact: SAMPLES 0) of every key of each family gives its bytes per user. Redis's own
CPU (INFO used_cpu_user + used_cpu_sys) per event of each ingest shape gives the events a shard
serves per second of CPU, so the model needs no client fast enough to saturate it. Then the same
batches run interleaved against the standalone server and a private 3-master cluster (16 last-seen
partitions), with each primary's CPU, to show how the cluster spreads the work and where it cannot.
The flush figures (rows/s per worker into PostgreSQL, WAL bytes per row) are bench/results/flush.json's.

    python -m bench.capacity                 # 100,000 users
    python -m bench.capacity --users 20000   # quicker

Writes bench/results/capacity.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict
from dataclasses import replace

from bench import harness
from project.redis_server import PrivateCluster

BATCH = 1000
TARGET_USERS, TARGET_EVENTS = 100_000_000, 1_000_000
HEADROOM = 0.5  # plan shards to run at half a core, for spikes, replication and the jobs


def events(first: int, count: int, path: bool, ts: float):
    from activity.events import Event

    return [Event(user=str(first + i), ts=ts, path=f"/p/{(first + i) % 500}" if path else None) for i in range(count)]


def visitors(first: int, count: int, ts: float) -> list[tuple[str, float]]:
    return [(f"{first + i:032x}", ts) for i in range(count)]


def cpu_seconds(client) -> float:
    """Redis CPU (user + sys) so far, summed over every primary of a cluster."""
    from redis.cluster import RedisCluster

    if isinstance(client, RedisCluster):
        infos = client.info("cpu", target_nodes=RedisCluster.PRIMARIES).values()
    else:
        infos = [client.info("cpu")]
    return sum(info["used_cpu_user"] + info["used_cpu_sys"] for info in infos)


def per_node_cpu(client) -> list[float]:
    from redis.cluster import RedisCluster

    infos = client.info("cpu", target_nodes=RedisCluster.PRIMARIES)
    return [infos[name]["used_cpu_user"] + infos[name]["used_cpu_sys"] for name in sorted(infos)]


def memory_by_family(client) -> dict[str, tuple[int, int]]:
    """Family pattern -> (keys, bytes by MEMORY USAGE SAMPLES 0), over every key of the prefix."""
    from activity.store import keys

    found: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key in client.scan_iter(match=keys.sweep_pattern(), count=1000):
        declared = keys.family_of(key)
        name = declared[0].pattern if declared else "other"
        found[name][0] += 1
        found[name][1] += client.memory_usage(key, samples=0)
    return {name: (count, size) for name, (count, size) in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    os.environ["ACTIVITY_REDIS_TIMEOUT"] = "30"  # a loaded shared machine: batches of 1,000 take a while
    server = harness.start("bench:")
    try:
        with PrivateCluster() as cluster:
            run(options.users, options.rounds, cluster.url)
    finally:
        server.stop()


def run(users: int, rounds: int, cluster_url: str) -> None:
    from django.test import override_settings

    from activity import clock
    from activity.services import ingest, reports
    from activity.store.audience import VISITOR_SHARDS
    from activity.store.client import get_client

    now = clock.now()
    client = get_client()
    # 1. Memory: every user seen once with a page view, one anonymous visitor per user.
    started = time.perf_counter()
    for first in range(0, users, BATCH):
        ingest.record_events(events(first, BATCH, True, now), visitors(first, BATCH, now))
    seed_seconds = time.perf_counter() - started
    # The by-name entries as the reports hold them: merged from the pending sets into the indexes.
    drain = replace(reports.Policy.current(), merge_slices=users)
    for period in reports.PERIODS:
        reports.merge_pending(period, now, drain)
    memory = memory_by_family(client)
    per_user = {name: size / users for name, (_, size) in memory.items()}

    # 2. Redis CPU per event of each ingest shape, on returning users (the steady state).
    last_seen_shape = "last seen only (API event without path)"
    page_view_shape = "page view (event with path: last seen + session + page statistics + actives + visitor)"
    shapes = {
        last_seen_shape: dict(path=False, visits=False),
        page_view_shape: dict(path=True, visits=False),
        "anonymous visit (visitor only)": dict(path=False, visits=True),
    }
    cpu_us: dict[str, float] = {}
    command_us: dict[str, dict[str, float]] = {}
    sample = min(users, 50_000)
    for name, shape in shapes.items():
        samples = []
        for r in range(rounds):
            ts = now + 1 + r
            before, stats_before = cpu_seconds(client), client.info("commandstats")
            for first in range(0, sample, BATCH):
                if shape["visits"]:
                    ingest.record_events([], visitors(first, BATCH, ts))
                else:
                    ingest.record_events(events(first, BATCH, shape["path"], ts))
            samples.append((cpu_seconds(client) - before) * 1e6 / sample)
            stats = client.info("commandstats")
        cpu_us[name] = statistics.median(samples)
        # Where the last round's time went, per command (a script's inner commands count in both).
        command_us[name] = {
            command.removeprefix("cmdstat_"): (value["usec"] - stats_before.get(command, {}).get("usec", 0)) / sample
            for command, value in stats.items()
            if value["usec"] != stats_before.get(command, {}).get("usec", 0) and command != "cmdstat_info"
        }

    # 3. The same page-view batches on the standalone server and on the 3-master cluster, interleaved.
    sizes = 20_000
    cluster_settings = dict(REDIS_URL=cluster_url, ACTIVITY_REDIS_CLUSTER=True, ACTIVITY_LAST_SEEN_PARTITIONS=16)

    def ingest(tick: list[int]) -> None:
        tick[0] += 1
        for first in range(0, sizes, BATCH):
            ingest.record_events(events(first, BATCH, True, now + 100 + tick[0]), visitors(first, 200, now))

    tick = [0]

    def on_cluster() -> None:
        with override_settings(**cluster_settings):
            ingest(tick)

    with override_settings(**cluster_settings):
        cluster_client = get_client()
        before_nodes = per_node_cpu(cluster_client)
    rates = harness.interleaved({"standalone": (lambda: ingest(tick), sizes), "cluster": (on_cluster, sizes)}, rounds)
    with override_settings(**cluster_settings):
        node_cpu = [after - before for after, before in zip(per_node_cpu(cluster_client), before_nodes, strict=True)]
    busiest_share = max(node_cpu) / sum(node_cpu)

    flush_figures = json.loads((harness.RESULTS / "flush.json").read_text())
    flush_rows = {phase["returning"]: phase["rows_per_s"] for phase in flush_figures["phases"] if phase["rows"] >= 1e6}
    wal_per_row = [p["wal_bytes"] / p["rows"] for p in flush_figures["phases"] if p["rows"] >= 1e6]

    bytes_per_user = sum(size for name, size in per_user.items() if not name.startswith("{vis:"))
    bytes_per_visitor = sum(size for name, size in per_user.items() if name.startswith("{vis:"))
    page_view_us = cpu_us[page_view_shape]
    last_seen_us = cpu_us[last_seen_shape]
    shard_events = 1e6 / page_view_us
    shards_cpu = TARGET_EVENTS / (shard_events * HEADROOM)
    memory_gb = TARGET_USERS * (bytes_per_user + bytes_per_visitor) / 1e9
    flush_workers = TARGET_EVENTS / flush_rows[True]
    results = {
        "users": users,
        "seed_seconds": seed_seconds,
        "memory_by_family": {
            name: {"keys": k, "bytes": b, "bytes_per_user": b / users} for name, (k, b) in memory.items()
        },
        "bytes_per_user": bytes_per_user,
        "bytes_per_visitor": bytes_per_visitor,
        "redis_cpu_us_per_event": cpu_us,
        "command_us_per_event": command_us,
        "events_per_s_per_shard_core": {name: 1e6 / us for name, us in cpu_us.items()},
        "ingest_events_per_s_client": rates,
        "cluster_over_standalone": rates["cluster"] / rates["standalone"],
        "cluster_node_cpu_seconds": node_cpu,
        "cluster_busiest_node_share": busiest_share,
        "flush_rows_per_s_per_worker": {"new rows": flush_rows[False], "existing rows": flush_rows[True]},
        "flush_wal_bytes_per_row": wal_per_row,
        "visitor_shards": VISITOR_SHARDS,
        "model": {
            "users": TARGET_USERS,
            "events_per_s": TARGET_EVENTS,
            "headroom": HEADROOM,
            "shards_by_cpu_if_spread": shards_cpu,
            "memory_gb": memory_gb,
            "flush_workers_worst_case": flush_workers,
            "last_seen_only_us": last_seen_us,
        },
    }
    table = [["structure (key family)", "keys", "bytes per user"]]
    for name, (count, size) in sorted(memory.items(), key=lambda item: -item[1][1]):
        table.append([f"`{name}`", f"{count:,}", f"{size / users:,.1f}"])
    table.append(["**users' structures, total**", "", f"{bytes_per_user:,.0f}"])
    table.append(["**visitors' structures (`{vis:N}`), total**", "", f"{bytes_per_visitor:,.0f}"])
    notes = [
        f"{users:,} users, one page view and one anonymous visit each today; MEMORY USAGE SAMPLES 0 of every key.",
        "",
        "| ingest shape | Redis CPU us per event | events/s per shard core |",
        "|---|---:|---:|",
    ]
    notes += [f"| {name} | {us:.1f} | {1e6 / us:,.0f} |" for name, us in cpu_us.items()]
    notes += [
        "",
        "| page-view batches of 1,000 (one client process) | events/s | ratio |",
        "|---|---:|---:|",
        f"| standalone | {rates['standalone']:,.0f} | 1.00x |",
        f"| 3-master cluster, 16 last-seen partitions | {rates['cluster']:,.0f} | "
        f"{rates['cluster'] / rates['standalone']:.2f}x |",
        "",
        f"Cluster: the busiest primary did {busiest_share:.0%} of the cluster's Redis CPU (each primary: "
        + ", ".join(f"{cpu:.2f} s" for cpu in node_cpu)
        + "). Flush (bench/results/flush.json): "
        + f"{flush_rows[False]:,.0f} new / {flush_rows[True]:,.0f} existing rows/s per worker. "
        + f"Medians of {rounds} rounds. Command: `python -m bench.capacity --users {users}`.",
    ]
    harness.write("capacity", results, table, "\n".join(notes))


if __name__ == "__main__":
    main()
