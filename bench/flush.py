"""Flush throughput and memory into PostgreSQL, and its write load against one ORM update per request.

For each backlog size (100,000 then 1,000,000 changed users) the same traffic is recorded in a
private redis-server: every user seen ``REQUESTS_PER_USER`` times (so Redis takes 3 updates per
user and holds one changed member each). A fresh process then flushes the whole backlog with
``activity.services.flush.flush`` (batches of 2,000, one upsert each) and reports rows/s and its peak
memory (``ru_maxrss``) before and after, so a flat peak at 10x the backlog shows bounded memory.
These users are new, so every row is inserted; a last phase sees the 1,000,000 users again, so
every row exists and is updated (the steady state of a running site).

Side by side, the anchors' way (one ``UserActivity.objects.filter(...).update(...)`` per request,
autocommit) runs over a sample of requests against the same table; the database work for the same
traffic is compared as statements, transactions, WAL bytes and seconds (the ORM figures for the
whole traffic are the sample's per-request figures times the requests; the flush's are measured).

Uses PostgreSQL at ``BENCH_PG`` (default postgres://postgres@127.0.0.1:5432) in a database of its
own, ``activity_bench_flush``, created and dropped by the run.

    python -m bench.flush            # 100,000 and 1,000,000 users
    python -m bench.flush --quick    # 10,000 and 100,000 users
    python -m bench.flush --smoke    # 1,000 and 10,000 users, 1,000 ORM updates: seconds

Writes bench/results/flush.json and .md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import psycopg

from bench import harness
from project.redis_server import PrivateRedis

ROOT = Path(__file__).resolve().parent.parent
PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
DATABASE = "activity_bench_flush"
BATCH = 2000
REQUESTS_PER_USER = 3
ORM_SAMPLE = 20_000  # requests; a smoke run takes a twentieth
RECORD_CHUNK = 5000


def setup_django(redis_url: str) -> None:
    os.environ.update(
        DJANGO_SETTINGS_MODULE="project.settings",
        DATABASE_URL=f"{PG}/{DATABASE}",
        REDIS_URL=redis_url,
        ACTIVITY_KEY_PREFIX="bench:",
    )
    import django

    django.setup()
    from activity.services import flush

    flush.BATCH = BATCH


def wal_lsn() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')")
        return int(cursor.fetchone()[0])


def checkpointed_wal_lsn() -> int:
    """The WAL position right after a CHECKPOINT, so both ways start with the same full-page writes
    ahead of them (the first change of each page after a checkpoint logs the whole page)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")
    return wal_lsn()


def record(users: int, base: float) -> None:
    """Every user seen ``REQUESTS_PER_USER`` times, later each time, through ingest's last-seen step
    (the store queues its Lua update in a pipeline)."""
    from activity.store import last_seen as last_seen_store
    from activity.store.client import get_client

    client = get_client()
    for request in range(REQUESTS_PER_USER):
        for start in range(0, users, RECORD_CHUNK):
            scores = {
                str(user): base + request * 10 + user / 1e6 for user in range(start, min(users, start + RECORD_CHUNK))
            }
            pipe = client.pipeline(transaction=False)
            last_seen_store.queue_update(pipe, scores, base + request * 10)
            pipe.execute()


def flush_worker() -> None:
    """Run in a fresh process: flush everything; print rows, seconds and peak memory as JSON."""
    setup_django(os.environ["BENCH_REDIS_URL"])
    from django.db import connection

    from activity.services import flush

    connection.ensure_connection()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    result = flush.flush(batch_size=BATCH, budget=float("inf"))
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "rows": result.flushed,
                "batches": result.batches,
                "seconds": seconds,
                "rss_before_kb": before,
                "rss_peak_kb": after,
            }
        )
    )


def run_flush(redis_url: str) -> dict:
    env = dict(os.environ, BENCH_REDIS_URL=redis_url)
    out = subprocess.run(
        [sys.executable, "-m", "bench.flush", "--flush-worker"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def orm_per_request(users: int, base: float, sample: int) -> dict:
    """The anchors' way over ``sample`` requests: one ORM UPDATE (its own transaction) per request."""
    from django.db import connection

    from activity.models import UserActivity

    wal = checkpointed_wal_lsn()
    started = time.perf_counter()
    for request in range(sample):
        user = (request * 7919) % users
        seen = dt.datetime.fromtimestamp(base + 100 + request / 1e3, dt.UTC)
        UserActivity.objects.filter(user_id=str(user)).update(last_seen=seen)
    seconds = time.perf_counter() - started
    wal_bytes = wal_lsn() - wal
    connection.close()
    return {"requests": sample, "seconds": seconds, "wal_bytes": wal_bytes}


def measure(redis_url: str, users: int, base: float, returning: bool) -> dict:
    """Record the traffic, then flush it in a fresh process; rows/s, memory and WAL of the flush."""
    from django.db import connection

    started = time.perf_counter()
    record(users, base)
    recorded = time.perf_counter() - started
    wal = checkpointed_wal_lsn()
    connection.close()
    flushed = run_flush(redis_url)
    flushed["wal_bytes"] = wal_lsn() - wal
    flushed.update(users=users, returning=returning, requests=users * REQUESTS_PER_USER, record_seconds=recorded)
    flushed["rows_per_s"] = flushed["rows"] / flushed["seconds"]
    print(
        f"{users:>9} {'returning' if returning else 'new'} users: {flushed['rows_per_s']:,.0f} rows/s, "
        f"peak RSS {flushed['rss_peak_kb'] / 1024:.1f} MiB"
    )
    return flushed


def reset(redis_client) -> None:
    from activity.models import UserActivity

    UserActivity.objects.all().delete()
    redis_client.flushdb()  # the benchmark's own private server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10,000 and 100,000 users")
    parser.add_argument("--smoke", action="store_true", help="1,000 and 10,000 users, 1,000 ORM updates: seconds")
    parser.add_argument("--flush-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.flush_worker:
        flush_worker()
        return
    sizes = [1_000, 10_000] if args.smoke else [10_000, 100_000] if args.quick else [100_000, 1_000_000]
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    redis_server = PrivateRedis().start()
    try:
        setup_django(redis_server.url)
        from django.core.management import call_command

        from activity.store.client import get_client

        call_command("migrate", verbosity=0)
        base = time.time() - 86400
        phases = []
        for users in sizes:
            reset(get_client())
            phases.append(measure(redis_server.url, users, base, returning=False))
        # The steady state: the same users seen again, so every row exists and is updated.
        phases.append(measure(redis_server.url, sizes[-1], base + 3600, returning=True))
        orm = orm_per_request(sizes[-1], base, ORM_SAMPLE // 20 if args.smoke else ORM_SAMPLE)
    finally:
        redis_server.stop()
        from django.db import connections

        connections.close_all()
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DATABASE}")

    new_phases = [phase for phase in phases if not phase["returning"]]
    big = phases[-1]  # returning users: rows exist, as for the ORM's updates
    requests = big["requests"]
    orm_total = {
        "statements": requests,
        "transactions": requests,
        "wal_bytes": orm["wal_bytes"] / orm["requests"] * requests,
        "seconds": orm["seconds"] / orm["requests"] * requests,
    }
    flush_total = {
        "statements": big["batches"],  # one upsert (with its account lookup) per batch
        "transactions": big["batches"],
        "wal_bytes": big["wal_bytes"],
        "seconds": big["seconds"],
    }
    ratios = {name: orm_total[name] / flush_total[name] for name in flush_total}
    results = {
        "sizes": sizes,
        "batch": BATCH,
        "requests_per_user": REQUESTS_PER_USER,
        "phases": phases,
        "memory_growth_at_10x_backlog": new_phases[-1]["rss_peak_kb"] / new_phases[0]["rss_peak_kb"],
        "orm_sample": orm,
        "same_traffic": {
            "requests": requests,
            "orm_per_request": orm_total,
            "flush": flush_total,
            "orm_over_flush": ratios,
        },
    }
    harness.RESULTS.mkdir(exist_ok=True)
    (harness.RESULTS / "flush.json").write_text(json.dumps(results, indent=2) + "\n")
    (harness.RESULTS / "flush.md").write_text(markdown(results))
    print(markdown(results))


def markdown(results: dict) -> str:
    lines = [
        "| backlog (changed users) | rows | rows flushed | seconds | rows/s | peak RSS before / after flush (MiB) |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for phase in results["phases"]:
        rows = "exist (updated)" if phase["returning"] else "new (inserted)"
        lines.append(
            f"| {phase['users']:,} | {rows} | {phase['rows']:,} | {phase['seconds']:.1f} | {phase['rows_per_s']:,.0f} "
            f"| {phase['rss_before_kb'] / 1024:.1f} / {phase['rss_peak_kb'] / 1024:.1f} |"
        )
    same = results["same_traffic"]
    lines += [
        "",
        f"Peak memory at 10x the backlog (new rows): x{results['memory_growth_at_10x_backlog']:.2f}.",
        "",
        f"Database write load for the same traffic ({same['requests']:,} requests of returning users, "
        f"{results['requests_per_user']} per user, rows existing; ORM figures scaled from a "
        f"{results['orm_sample']['requests']:,}-request sample):",
        "",
        f"| | one ORM update per request | flush (batches of {results['batch']:,}) | ratio |",
        "|---|---:|---:|---:|",
    ]
    for name, label in (
        ("statements", "statements"),
        ("transactions", "transactions"),
        ("wal_bytes", "WAL bytes"),
        ("seconds", "seconds (wall)"),
    ):
        orm, flush = same["orm_per_request"][name], same["flush"][name]
        lines.append(f"| {label} | {orm:,.0f} | {flush:,.0f} | {same['orm_over_flush'][name]:,.1f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
