"""Membership store for "first visit ever": memory per id and check-and-set throughput, side by side.

Random 128-bit visitor ids are stored as flat keys (SET NX), partitioned hashes (HSETNX; partition =
low bits of the id) for several partition counts, one set (SADD) and one sorted set (ZADD NX), each
with the id as 32 hex characters and as 16 packed bytes. For each: bytes per id (``INFO memory``
``used_memory`` delta over the load), check-and-set throughput for misses (the load itself: every id
is new) and for hits (the same call on ids already stored), pipelined. One private redis-server, one
structure at a time (FLUSHALL between), so the ratios are measured under the same conditions.

    python -m bench.membership            # 1,000,000 ids
    python -m bench.membership --ids 200000

Writes bench/results/membership.json, .md and .png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

import redis

from project.redis_server import PrivateRedis

RESULTS = Path(__file__).resolve().parent / "results"
PARTITION_BITS = (8, 11, 14, 17)
DEFAULT_BITS = 14  # the service's ACTIVITY_VISITOR_PARTITION_BITS default
# The server config the docs recommend for partitioned hashes: a partition stays a compact listpack
# up to 512 fields (Redis 7 name; Redis 6 calls it hash-max-ziplist-entries).
SERVER_CONFIG = {"hash-max-listpack-entries": "512", "hash-max-listpack-value": "64"}
BATCH = 2000
HIT_SAMPLE = 100_000
DAY = 20415  # the value stored with each id: the day of the first visit, a small integer

Command = Callable[[redis.client.Pipeline, bytes], None]


def encode(ids: list[bytes], form: str) -> list[bytes]:
    return ids if form == "bin" else [i.hex().encode() for i in ids]


def structures(form: str) -> dict[str, Command]:
    """Name -> a function queuing one check-and-set of ``member`` (already in ``form``)."""
    out: dict[str, Command] = {"flat SETNX": lambda p, m: p.set(m, DAY, nx=True)}
    for bits in PARTITION_BITS:
        mask = (1 << bits) - 1

        def hsetnx(p: redis.client.Pipeline, m: bytes, mask: int = mask) -> None:
            raw = m if form == "bin" else bytes.fromhex(m.decode())
            p.hsetnx(b"h:%d" % (int.from_bytes(raw, "big") & mask), m, DAY)

        out[f"hash 2^{bits} HSETNX"] = hsetnx
    out["set SADD"] = lambda p, m: p.sadd("s", m)
    out["zset ZADD NX"] = lambda p, m: p.zadd("z", {m: DAY}, nx=True)
    return out


def run(client: redis.Redis, command: Command, members: list[bytes], expect: int) -> float:
    """Ops per second of ``command`` over ``members``, pipelined; checks every reply is ``expect``."""
    pipe = client.pipeline(transaction=False)
    start = time.perf_counter()
    for first in range(0, len(members), BATCH):
        for member in members[first : first + BATCH]:
            command(pipe, member)
        replies = pipe.execute()
        if any(int(bool(r)) != expect for r in replies):
            raise AssertionError(f"unexpected check-and-set reply (wanted {expect})")
    return len(members) / (time.perf_counter() - start)


def measure(client: redis.Redis, command: Command, members: list[bytes], hits: list[bytes]) -> dict[str, float]:
    client.flushall()
    before = client.info("memory")["used_memory"]
    miss = run(client, command, members, expect=1)
    used = client.info("memory")["used_memory"] - before
    hit = run(client, command, hits, expect=0)
    return {"bytes_per_id": used / len(members), "miss_ops": miss, "hit_ops": hit}


def table(rows: list[dict], n: int) -> str:
    flat = {r["form"]: r for r in rows if r["structure"] == "flat SETNX"}
    lines = [
        f"{n:,} random 128-bit ids; {json.dumps(SERVER_CONFIG)}; pipelined batches of {BATCH}.",
        "",
        "| structure | id as | bytes/id | beyond id | miss ops/s | miss vs flat | hit ops/s | hit vs flat |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        base = flat[r["form"]]
        lines.append(
            f"| {r['structure']} | {r['form']} | {r['bytes_per_id']:.1f} | {r['bytes_per_id'] - r['id_bytes']:.1f} "
            f"| {r['miss_ops']:,.0f} | {r['miss_ops'] / base['miss_ops']:.2f} "
            f"| {r['hit_ops']:,.0f} | {r['hit_ops'] / base['hit_ops']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], n: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["structure"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(16, 5))
    width = 0.4
    for offset, form in ((-width / 2, "hex"), (width / 2, "bin")):
        by = {r["structure"]: r for r in rows if r["form"] == form}
        xs = [i + offset for i in range(len(names))]
        axes[0].bar(xs, [by[s]["bytes_per_id"] for s in names], width, label=form)
        axes[1].bar(xs, [by[s]["miss_ops"] / 1000 for s in names], width, label=form)
        axes[2].bar(xs, [by[s]["hit_ops"] / 1000 for s in names], width, label=form)
    for ax, title in zip(
        axes,
        ("bytes per id (used_memory delta)", "miss check-and-set, k ops/s", "hit check-and-set, k ops/s"),
        strict=True,
    ):
        ax.set_title(title)
        ax.set_xticks(range(len(names)), names, rotation=40, ha="right")
        ax.legend()
    fig.suptitle(f"Membership store: {n:,} random 128-bit ids")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=1_000_000)
    args = parser.parse_args()
    rng = random.Random(6)
    ids = [rng.getrandbits(128).to_bytes(16, "big") for _ in range(args.ids)]
    hits_sample = rng.sample(ids, min(HIT_SAMPLE, len(ids)))
    rows: list[dict] = []
    with PrivateRedis() as server:
        client = redis.Redis.from_url(server.url)
        for name, value in SERVER_CONFIG.items():
            client.config_set(name, value)
        for form in ("hex", "bin"):
            members, hits = encode(ids, form), encode(hits_sample, form)
            for name, command in structures(form).items():
                figures = measure(client, command, members, hits)
                rows.append({"structure": name, "form": form, "id_bytes": len(members[0]), **figures})
                print(
                    f"{name:18} {form}: {figures['bytes_per_id']:6.1f} B/id  "
                    f"miss {figures['miss_ops']:9,.0f}/s  hit {figures['hit_ops']:9,.0f}/s",
                    flush=True,
                )
        version = client.info("server")["redis_version"]
    RESULTS.mkdir(exist_ok=True)
    default = next(r for r in rows if r["structure"] == f"hash 2^{DEFAULT_BITS} HSETNX" and r["form"] == "bin")
    flat = next(r for r in rows if r["structure"] == "flat SETNX" and r["form"] == "bin")
    verdict = {
        "default": f"hash 2^{DEFAULT_BITS} HSETNX, bin",
        "bytes_beyond_id": default["bytes_per_id"] - default["id_bytes"],
        "miss_vs_flat": default["miss_ops"] / flat["miss_ops"],
    }
    verdict["meets_target"] = verdict["bytes_beyond_id"] <= 40 and verdict["miss_vs_flat"] >= 0.8
    meta = {"ids": args.ids, "redis": version, "cpus": os.cpu_count(), "server_config": SERVER_CONFIG}
    (RESULTS / "membership.json").write_text(json.dumps({**meta, "verdict": verdict, "rows": rows}, indent=2) + "\n")
    (RESULTS / "membership.md").write_text(table(rows, args.ids) + f"\nDefault: {json.dumps(verdict)}\n")
    plot(rows, args.ids, RESULTS / "membership.png")
    print(table(rows, args.ids))
    print("default:", json.dumps(verdict))


if __name__ == "__main__":
    main()
