"""First visits through ``ingest.record_events``, on one private Redis (``python -m bench.first_visits``).

Anonymous visitors in batches of 1,000, as the tracking thread sends them: new ids, the same ids
the next day (found in the current generation), and 100 days later (found in the previous
generation and moved). Two sites: a young one (no older generation exists yet) and an aged one,
whose 4 older live generations each hold a fifth as many other visitors (hashtables, as a real
site's), so a new id is looked up in each. For each phase: Redis's own CPU per visitor (``INFO
cpu``), EVALSHA calls per batch, each command's microseconds per visitor (``INFO commandstats``, a
script's inner commands counted in both) and the memory delta per visitor (``used_memory``); and
after the young site's new ids, the first-visit hashes' exact ``MEMORY USAGE`` per entry. Nothing
here names a layout's keys (only the ``{vis:N}`` tag and the hash type), so the same file measures
earlier commits:

    python -m bench.first_visits               # 100,000 visitors
    python -m bench.first_visits --visitors 20000
    python -m bench.first_visits --out first_visits_before_generations   # run on an older commit

Writes bench/results/<out>.json and .md.
"""

from __future__ import annotations

import argparse
import secrets

from bench import harness

BATCH = 1000
NOON = 1795435200.0  # 2026-11-23 12:00 UTC, day 20780: generation 207 (days 20700-20799)
DAY = 86400
PHASES = {"new ids": 0, "same ids, the next day": 1, "same ids, 100 days later (moved)": 101}
# Days before NOON on which the aged site saw other visitors: generations 206, 205, 204 and 203,
# all still alive at NOON (and 100 days later but 203).
AGED = (-90, -190, -290, -390)


def first_visit_hashes(client) -> tuple[int, int]:
    """(entries, bytes by exact MEMORY USAGE) of the first-visit hashes, whatever their layout."""
    found = [key for key in client.scan_iter(match="bench:{vis:*", count=1000, _type="hash")]
    pipe = client.pipeline(transaction=False)
    for key in found:
        pipe.hlen(key)
        pipe.memory_usage(key, samples=0)
    replies = pipe.execute()
    return sum(replies[0::2]), sum(replies[1::2])


def series(client, ingest, clock, visitors: int, aged: bool) -> dict:
    """The phases on an emptied Redis; ``aged``: other visitors seen on the ``AGED`` days first."""
    client.flushall()
    for days in AGED if aged else ():
        ts = NOON + days * DAY
        clock.now = lambda ts=ts: ts
        for _ in range(0, visitors // 5, BATCH):
            ingest.record_events([], visitors=[(secrets.token_hex(16), ts) for _ in range(BATCH)])
    ids = [secrets.token_hex(16) for _ in range(visitors)]
    phases = {}
    for name, days in PHASES.items():
        ts = NOON + days * DAY
        clock.now = lambda ts=ts: ts
        client.config_resetstat()
        memory, cpu = client.info("memory")["used_memory"], client.info("cpu")
        new = 0
        for start in range(0, visitors, BATCH):
            batch = [(visitor, ts) for visitor in ids[start : start + BATCH]]
            new += ingest.record_events([], visitors=batch).new_visitors
        after = client.info("cpu")
        used = sum(after[k] - cpu[k] for k in ("used_cpu_sys", "used_cpu_user"))
        stats = client.info("commandstats")
        phases[name] = {
            "new_visitors": new,
            "redis_cpu_us_per_visitor": used * 1e6 / visitors,
            "evalsha_per_batch": stats["cmdstat_evalsha"]["calls"] * BATCH / visitors,
            "command_us_per_visitor": {
                command.removeprefix("cmdstat_"): value["usec"] / visitors
                for command, value in stats.items()
                if command not in ("cmdstat_info", "cmdstat_config|resetstat")
            },
            "memory_bytes_per_visitor": (client.info("memory")["used_memory"] - memory) / visitors,
            "keys": client.dbsize(),
        }
        if name == "new ids" and not aged:
            entries, size = first_visit_hashes(client)
            phases[name]["hash_entries"], phases[name]["hash_bytes_per_entry"] = entries, size / entries
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--visitors", type=int, default=100_000)
    parser.add_argument("--out", default="first_visits", help="results name under bench/results/")
    options = parser.parse_args()
    server = harness.start()
    from activity import clock
    from activity.services import ingest
    from activity.store.client import get_client

    client = get_client()
    try:
        sites = {site: series(client, ingest, clock, options.visitors, site == "aged") for site in ("young", "aged")}
    finally:
        server.stop()
    table = [["site", "phase", "new", "Redis CPU µs / visitor", "EVALSHA / batch", "bytes / visitor", "keys"]]
    for site, phases in sites.items():
        for name, found in phases.items():
            table.append(
                [
                    site,
                    name,
                    f"{found['new_visitors']:,}",
                    f"{found['redis_cpu_us_per_visitor']:.1f}",
                    f"{found['evalsha_per_batch']:,.0f}",
                    f"{found['memory_bytes_per_visitor']:.0f}",
                    f"{found['keys']:,}",
                ]
            )
    young = sites["young"]["new ids"]
    notes = (
        f"{options.visitors:,} anonymous visitors in batches of {BATCH:,}; each phase once, on a shared 2-core "
        f"machine. The first-visit hashes after the young site's new ids: {young['hash_entries']:,} entries, "
        f"{young['hash_bytes_per_entry']:.1f} bytes each by MEMORY USAGE (SAMPLES 0)."
    )
    harness.write(options.out, {"visitors": options.visitors, "batch": BATCH, "sites": sites}, table, notes)


if __name__ == "__main__":
    main()
