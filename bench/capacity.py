"""Figures for the capacity model (docs/capacity.md): bytes per user and visitor in each structure,
Redis CPU per event of the whole ingest path, the Redis calls and commands per event, and the same
ingest on one server and on a 3-master cluster side by side.

A private redis-server (one shard) takes ``--users`` users, each with one page view and one visit
today through ``ingest.record_events`` in batches of 1,000 (the API's and the Celery task's path):
MEMORY USAGE (exact: SAMPLES 0) of every key of each family gives its bytes per user. Redis's own
CPU (INFO used_cpu_user + used_cpu_sys) per event of each ingest shape gives the events a shard
serves per second of CPU, so the model needs no client fast enough to saturate it; one batch of each
shape under MONITOR gives its calls (each script by name) and the commands they run. Ingest leaves
out a day's idempotent writes this process made lately, so the bench pins the clock and moves it
past that memory where a shape needs it; anonymous visits come from visitors never seen before.
Then the same batches run interleaved against the standalone server and a private 3-master cluster
(16 last-seen partitions), each side pushed once first, with each primary's CPU, the hash tags it
holds and the commands it ran, to show how the cluster spreads the work and where it cannot. The
flush figures (rows/s per worker into PostgreSQL, WAL bytes per row) are bench/results/flush.json's.

    python -m bench.capacity                 # 100,000 users, 3 rounds
    python -m bench.capacity --users 20000   # quicker
    python -m bench.capacity --smoke         # seconds: 2,000 users, one round

Writes bench/results/capacity.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from bench import harness
from project.redis_server import PrivateCluster

BATCH = 1000
TARGET_USERS, TARGET_EVENTS = 100_000_000, 1_000_000
HEADROOM = 0.5  # plan shards to run at half a core, for spikes, replication and the jobs
CLUSTER_PARTITIONS = 16  # last-seen partitions of the cluster run, so its writes spread over the primaries
FORGET = 120  # seconds the clock moves to pass what ingest remembers of a day's writes (DAY_WRITES_CACHE)
LAST_SEEN = "last seen only, returning user (API event without path)"
PAGE_VIEW = "page view, returning user (last seen + session + page statistics)"
PAGE_VIEW_FIRST = "page view, the user's first in this process today (+ actives + the user's visitor)"
ANONYMOUS = "anonymous visit, a new visitor each (first visit + unique visitors)"
SHORT = {LAST_SEEN: "last seen", PAGE_VIEW: "page view", PAGE_VIEW_FIRST: "first page view", ANONYMOUS: "anonymous"}


def events(first: int, count: int, path: bool, ts: float):
    from activity.events import Event

    return [Event(user=str(first + i), ts=ts, path=f"/p/{(first + i) % 500}" if path else None) for i in range(count)]


def visitors(first: int, count: int, ts: float) -> list[tuple[str, float]]:
    return [(f"{first + i:032x}", ts) for i in range(count)]


def cpu_seconds(client) -> float:
    """Redis CPU (user + sys) so far of one server (a cluster's primaries: ``per_node``)."""
    info = client.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]


def per_node(client) -> dict[str, tuple[float, dict[str, int]]]:
    """Each primary of a cluster, by name: its Redis CPU (user + sys) so far, and each command's
    microseconds so far (INFO commandstats; a script's inner commands count in it and in EVALSHA)."""
    from redis.cluster import RedisCluster

    cpu = client.info("cpu", target_nodes=RedisCluster.PRIMARIES)
    stats = client.info("commandstats", target_nodes=RedisCluster.PRIMARIES)
    return {
        name: (
            info["used_cpu_user"] + info["used_cpu_sys"],
            {c.removeprefix("cmdstat_"): v["usec"] for c, v in stats[name].items()},
        )
        for name, info in cpu.items()
    }


def held_tags(client, tags: list[str]) -> dict[str, str]:
    """What each primary of a cluster holds of the hash tags ``tags``, by the primary's name: the
    single tags named, the numbered ones (``ls:<n>``, ``vis:<n>``, ``grp-index:<n>``) counted."""
    held: dict[str, list[str]] = defaultdict(list)
    for tag in tags:
        held[client.get_node_from_key(f"{{{tag}}}").name].append(tag)
    described = {}
    for name, found in held.items():
        numbered = Counter(tag.split(":")[0] for tag in found if ":" in tag)
        single = [f"{{{tag}}}" for tag in found if ":" not in tag]
        described[name] = ", ".join(single + [f"{count} {{{family}:<n>}}" for family, count in numbered.items()])
    return described


def memory_by_family(client) -> dict[str, tuple[int, int]]:
    """Family pattern -> (keys, bytes by MEMORY USAGE SAMPLES 0), over every key of the prefix."""
    from activity.store import families

    found: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for key in client.scan_iter(match=families.sweep_pattern(), count=1000):
        declared = families.family_of(key)
        name = declared[0].pattern if declared else "other"
        found[name][0] += 1
        found[name][1] += client.memory_usage(key, samples=0)
    return {name: (count, size) for name, (count, size) in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="seconds: 2,000 users, one round")
    options = parser.parse_args()
    users, rounds = (2000, 1) if options.smoke else (options.users, options.rounds)
    os.environ["ACTIVITY_REDIS_TIMEOUT"] = "30"  # a loaded shared machine: batches of 1,000 take a while
    server = harness.start("bench:")
    try:
        with PrivateCluster() as cluster:
            run(users, rounds, cluster.url)
    finally:
        server.stop()


def script_names() -> dict[str, str]:
    """SHA -> name of every script in ``lua/``, to name the EVALSHAs MONITOR shows."""
    from activity.store.scripts import LUA_DIR, LuaScript

    names = (path.name.removesuffix(".lua") for path in LUA_DIR.iterdir() if path.name.endswith(".lua"))
    return {LuaScript(name).sha: name for name in names}


def commands_per_event(client, send: Callable[[], None], count: int) -> dict[str, dict[str, Any]]:
    """What ``send`` (``count`` events) asks of Redis, from MONITOR: per call (a script by name, else
    the command), calls and the commands it runs inside per 1,000 events, with the hash tags of the
    keys they touch. MONITOR shows a script's own commands right after the EVALSHA that runs them."""
    scripts, end = script_names(), f"bench:commands-end:{time.time()}"
    found: dict[str, dict[str, Any]] = defaultdict(lambda: {"calls": 0, "inner": 0, "tags": set()})
    with client.monitor() as monitor:
        threading.Thread(target=lambda: (send(), client.echo(end)), daemon=True).start()
        for line in monitor.listen():
            words = line["command"].split(" ")
            name = words[0].lower()
            if name == "echo" and words[1:] == [end]:
                break
            if line["client_type"] != "lua":
                entry = found[f"{scripts.get(words[1], words[1])} (script)" if name == "evalsha" else name]
                entry["calls"] += 1
            else:
                entry["inner"] += 1
            entry["tags"] |= {tag_of(word) for word in words[1:] if tag_of(word)}
    return {
        call: {"calls": e["calls"] * 1000 / count, "inner": e["inner"] * 1000 / count, "tags": sorted(e["tags"])}
        for call, e in sorted(found.items())
    }


def time_per_call(client, send: Callable[[int], None], count: int) -> dict[str, float]:
    """Redis's time per event running each script ``send`` calls for ``count`` events, by name, from
    SLOWLOG: a script's duration holds its commands inside, not reading the request or writing the
    reply. Calls under 100 us are left out (under 0.1 us an event of a batch of 1,000), so the
    commands a script runs, a few us each, are not logged beside it."""
    scripts, saved = script_names(), client.config_get("slowlog-*")
    client.config_set("slowlog-log-slower-than", 100)
    client.config_set("slowlog-max-len", 10_000)
    client.slowlog_reset()
    try:
        for first in range(0, count, BATCH):
            send(first)
        entries = client.slowlog_get(10_000)
    finally:
        for name, value in saved.items():
            client.config_set(name, value)
    found: dict[str, float] = defaultdict(float)
    for entry in entries:
        words = entry["command"].decode(errors="replace").split(" ")  # redis-py hands it over as bytes
        if words[0].lower() == "evalsha":
            found[scripts.get(words[1], words[1])] += entry["duration"]
    return {call: us / count for call, us in sorted(found.items())}


def time_table(call_us: dict[str, dict[str, float]], cpu_us: dict[str, float]) -> list[str]:
    """Each call's time per event, beside the shape's whole Redis CPU: the rest reads requests and
    writes replies."""
    names = sorted({call for shape in call_us.values() for call in shape})
    lines = [
        "| per event: Redis time running each call, us (SLOWLOG) | " + " | ".join(map(SHORT.get, call_us)) + " |",
        "|---|" + "---:|" * len(call_us),
    ]
    for call in names:
        cells = [f"{shape[call]:.2f}" if call in shape else "" for shape in call_us.values()]
        lines.append(f"| `{call}` | " + " | ".join(cells) + " |")
    ran = [sum(shape.values()) for shape in call_us.values()]
    lines.append("| **running the calls, in all** | " + " | ".join(f"{t:.1f}" for t in ran) + " |")
    lines.append("| **Redis CPU (INFO), in all** | " + " | ".join(f"{cpu_us[shape]:.1f}" for shape in call_us) + " |")
    return lines


def tag_of(key: str) -> str | None:
    """The hash tag of one of the service's keys, its numbers as ``N`` (``{ls:3}`` is ``{ls:N}``)."""
    from activity.store import keys

    if not key.startswith(keys.prefix()) or "{" not in key or "}" not in key:
        return None
    return re.sub(r"\d+", "N", key[key.index("{") : key.index("}") + 1])


def run(users: int, rounds: int, cluster_url: str) -> None:
    from django.test import override_settings

    from activity import clock
    from activity.services import ingest, reports
    from activity.store import last_seen
    from activity.store.audience import VISITOR_SHARDS
    from activity.store.client import get_client
    from activity.store.groups import INDEX_PARTITIONS
    from activity.store.sessions import PATH_PARTITIONS, path_tag

    moment = [clock.now()]
    clock.now = lambda: moment[0]  # ingest remembers a day's writes until a moment: the bench moves it
    now = moment[0]
    client = get_client()
    written = ingest.DayWrites()  # what the service's callers pass: a day's writes left out once made

    def record(*args: Any) -> None:
        ingest.record_events(*args, day_writes=written)

    # 1. Memory: every user seen once with a page view, one anonymous visitor per user.
    started = time.perf_counter()
    for first in range(0, users, BATCH):
        record(events(first, BATCH, True, now), visitors(first, BATCH, now))
    seed_seconds = time.perf_counter() - started
    # The by-name entries as the reports hold them: merged from the pending sets into the indexes.
    drain = replace(reports.Policy.current(), merge_slices=users)
    for period in reports.REPORT_PERIODS:
        reports.merge_pending(period, now, drain)
    memory = memory_by_family(client)
    per_user = {name: size / users for name, (_, size) in memory.items()}

    # 2. Redis CPU per event of each ingest shape. Returning users whose day this process has written
    # (it then leaves out the day's idempotent writes), the same users' first event in this process
    # (the clock moved past what it remembers), and anonymous visits by visitors never seen before.
    fresh = [users]

    def new_visitors(count: int) -> list[tuple[str, float]]:
        fresh[0] += count
        return visitors(fresh[0] - count, count, moment[0])

    shapes: dict[str, tuple[Callable[[int], None], bool]] = {
        LAST_SEEN: (lambda first: record(events(first, BATCH, False, moment[0])), False),
        PAGE_VIEW: (lambda first: record(events(first, BATCH, True, moment[0])), False),
        PAGE_VIEW_FIRST: (lambda first: record(events(first, BATCH, True, moment[0])), True),
        ANONYMOUS: (lambda first: record([], new_visitors(BATCH)), False),
    }
    cpu_us: dict[str, float] = {}
    command_us: dict[str, dict[str, float]] = {}
    calls: dict[str, dict[str, dict[str, float]]] = {}
    call_us: dict[str, dict[str, float]] = {}
    sample = min(users, 50_000)
    for name, (send, forget) in shapes.items():
        samples = []
        for r in range(rounds + 1):  # round 0 warms up: this process writes the users' day
            moment[0] += FORGET if forget else 1
            before, stats_before = cpu_seconds(client), client.info("commandstats")
            for first in range(0, sample, BATCH):
                send(first)
            if r:
                samples.append((cpu_seconds(client) - before) * 1e6 / sample)
            stats = client.info("commandstats")
        cpu_us[name] = statistics.median(samples)
        # Where the last round's time went, per command (a script's inner commands count in both).
        command_us[name] = {
            command.removeprefix("cmdstat_"): (value["usec"] - stats_before.get(command, {}).get("usec", 0)) / sample
            for command, value in stats.items()
            if value["usec"] != stats_before.get(command, {}).get("usec", 0) and command != "cmdstat_info"
        }
        moment[0] += FORGET if forget else 1
        calls[name] = commands_per_event(client, partial(send, 0), BATCH)
        moment[0] += FORGET if forget else 1
        call_us[name] = time_per_call(client, send, min(sample, 10 * BATCH))

    # 3. The same page-view batches on the standalone server and on the 3-master cluster, interleaved.
    sizes = min(users, 20_000)
    cluster_settings = dict(
        REDIS_URL=cluster_url, ACTIVITY_REDIS_CLUSTER=True, ACTIVITY_LAST_SEEN_PARTITIONS=CLUSTER_PARTITIONS
    )

    def push() -> None:
        moment[0] += 1
        for first in range(0, sizes, BATCH):
            record(events(first, BATCH, True, moment[0]), visitors(first, 200, moment[0]))

    def on_cluster() -> None:
        with override_settings(**cluster_settings):
            push()

    # The cluster has not seen these users: one push each first, so the CPU counted below is of
    # returning users' views on both, not of the cluster making every user's keys.
    push()
    on_cluster()
    with override_settings(**cluster_settings):
        cluster_client = get_client()
        cluster_partitions = last_seen.partition_count()  # what the run used, not what it asked for
        before_nodes = per_node(cluster_client)
        tags = ["ses", "pv", "now", "au", "uv"] + [f"ls:{n}" for n in range(cluster_partitions)]
        spread = [f"vis:{n}" for n in range(VISITOR_SHARDS)] + [f"grp-index:{n}" for n in range(INDEX_PARTITIONS)]
        spread += [path_tag(n) for n in range(PATH_PARTITIONS)]
        holds = held_tags(cluster_client, tags + spread)
    before_standalone = cpu_seconds(client)
    rates = harness.interleaved({"standalone": (push, sizes), "cluster": (on_cluster, sizes)}, rounds)
    standalone_cpu = cpu_seconds(client) - before_standalone
    with override_settings(**cluster_settings):
        after_nodes = per_node(cluster_client)
    node_cpu = {name: cpu - before_nodes[name][0] for name, (cpu, _) in after_nodes.items()}
    pushed = sizes * (rounds + 1)  # the interleaved run's warm-up and rounds, on each side
    node_us = {
        name: {
            command: (usec - before_nodes[name][1].get(command, 0)) / pushed
            for command, usec in used.items()
            if usec > before_nodes[name][1].get(command, 0)
        }
        for name, (_, used) in after_nodes.items()
    }
    primaries = [
        {"cpu_seconds": cpu, "holds": holds.get(name, ""), "command_us_per_event": node_us[name]}
        for name, cpu in sorted(node_cpu.items(), key=lambda item: -item[1])
    ]
    busiest_share = primaries[0]["cpu_seconds"] / sum(node_cpu.values())
    # Both took the same batches: how many times one server's page views the cluster takes before its
    # busiest primary's core is full, given client processes and cores enough to push them.
    ceiling_ratio = standalone_cpu / primaries[0]["cpu_seconds"]

    flush_figures = json.loads((harness.COMMITTED / "flush.json").read_text())
    flush_rows = {phase["returning"]: phase["rows_per_s"] for phase in flush_figures["phases"] if phase["rows"] >= 1e6}
    wal_per_row = [p["wal_bytes"] / p["rows"] for p in flush_figures["phases"] if p["rows"] >= 1e6]

    bytes_per_user = sum(size for name, size in per_user.items() if not name.startswith("{vis:"))
    bytes_per_visitor = sum(size for name, size in per_user.items() if name.startswith("{vis:"))
    page_view_us = cpu_us[PAGE_VIEW]
    last_seen_us = cpu_us[LAST_SEEN]
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
        "calls_per_event": calls,
        "execution_us_per_event_by_call": call_us,
        "events_per_s_per_shard_core": {name: 1e6 / us for name, us in cpu_us.items()},
        "ingest_events_per_s_client": rates,
        "cluster_over_standalone": rates["cluster"] / rates["standalone"],
        "cluster_last_seen_partitions": cluster_partitions,
        "cluster_primaries": primaries,
        "cluster_busiest_node_share": busiest_share,
        "standalone_cpu_seconds": standalone_cpu,
        "cluster_ceiling_over_standalone": ceiling_ratio,
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
    notes += ["", *calls_table(calls), "", *time_table(call_us, cpu_us), ""]
    notes += [
        "| page-view batches of 1,000 (one client process) | events/s | ratio |",
        "|---|---:|---:|",
        f"| standalone | {rates['standalone']:,.0f} | 1.00x |",
        f"| 3-master cluster, {cluster_partitions} last-seen partitions | {rates['cluster']:,.0f} | "
        f"{rates['cluster'] / rates['standalone']:.2f}x |",
        "",
        f"Cluster: the busiest primary did {busiest_share:.0%} of the cluster's Redis CPU (each primary: "
        + "; ".join(f"{primary['cpu_seconds']:.2f} s holding {primary['holds']}" for primary in primaries)
        + f"). The same batches took the standalone server {standalone_cpu:.2f} s of CPU: the cluster's "
        + f"Redis side takes {ceiling_ratio:.2f}x one server's page views before its busiest primary's core "
        + "is full (with client processes and cores enough to push them; this machine has two). "
        + "Flush (bench/results/flush.json): "
        + f"{flush_rows[False]:,.0f} new / {flush_rows[True]:,.0f} existing rows/s per worker. "
        + f"Medians of {rounds} rounds. Command: `python -m bench.capacity --users {users} --rounds {rounds}`.",
    ]
    notes += ["", *primaries_table(primaries, pushed)]
    harness.write("capacity", results, table, "\n".join(notes))


def primaries_table(primaries: list[dict[str, Any]], pushed: int) -> list[str]:
    """Where each primary's CPU went in the cluster run, per page view pushed."""
    lines = [
        "| cluster primary holding | Redis CPU us a page view | in scripts (EVALSHA) "
        "| commands, in scripts or not: the largest |",
        "|---|---:|---:|---|",
    ]
    for primary in primaries:
        commands = dict(primary["command_us_per_event"])
        scripts = commands.pop("evalsha", 0.0)
        largest = sorted(commands.items(), key=lambda item: -item[1])[:5]
        cells = [primary["holds"], f"{primary['cpu_seconds'] * 1e6 / pushed:.1f}", f"{scripts:.1f}"]
        cells.append(", ".join(f"{command.upper()} {us:.2f}" for command, us in largest))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def calls_table(calls: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Calls per 1,000 events of each shape, by script or command: "calls (+ commands inside)"."""
    names = sorted({call for shape in calls.values() for call in shape})
    lines = [
        "| per 1,000 events: calls (+ commands inside) | key tags | " + " | ".join(map(SHORT.get, calls)) + " |",
        "|---|---|" + "---:|" * len(calls),
    ]
    for call in names:
        tags = sorted({tag for shape in calls.values() for tag in shape.get(call, {}).get("tags", [])})
        cells = []
        for shape in calls.values():
            found = shape.get(call)
            cells.append(f"{found['calls']:,.0f} (+{found['inner']:,.0f})" if found else "")
        lines.append(f"| `{call}` | {' '.join(f'`{tag}`' for tag in tags)} | " + " | ".join(cells) + " |")
    totals = [sum(found["calls"] + found["inner"] for found in shape.values()) / 1000 for shape in calls.values()]
    lines.append("| **Redis commands per event, in all** | | " + " | ".join(f"{t:.2f}" for t in totals) + " |")
    return lines


if __name__ == "__main__":
    main()
