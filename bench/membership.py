"""Membership store for "first visit ever": memory per id and check-and-set throughput, side by side.

Random 128-bit visitor ids are stored as flat keys (SET NX), partitioned hashes (HSETNX; partition =
low bits of the id) for several partition counts, one set (SADD) and one sorted set (ZADD NX), each
with the id as 32 hex characters and as 16 packed bytes. For each: bytes per id (``INFO memory``
``used_memory`` delta over the load) and check-and-set throughput for misses (new ids) and hits (ids
already stored), pipelined. One private redis-server per id form, one database per structure.

Commands are sent as pre-encoded RESP over a plain socket and replies parsed by hiredis, so the
throughput is the server's, not redis-py's command building. This 2-core machine is shared, so each
throughput is the best of ``ROUNDS`` rounds over a sample of ids (insert the sample: misses; repeat
it: hits; delete it again), and the rounds interleave all structures, side by side in time.

    python -m bench.membership            # 1,000,000 ids
    python -m bench.membership --ids 200000

Writes bench/results/membership.json, .md and .png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path

import hiredis
import redis

from bench import harness
from project.redis_server import PrivateRedis

PARTITION_BITS = (8, 11, 14, 16, 17, 18)
DEFAULT_BITS = 17  # the service's store.audience.PARTITION_BITS
# The server config the docs recommend for partitioned hashes: a partition stays a compact listpack
# up to 512 fields (Redis 7 name; Redis 6 calls it hash-max-ziplist-entries).
SERVER_CONFIG = {"hash-max-listpack-entries": "512", "hash-max-listpack-value": "64"}
BATCH = 2000
SAMPLE = 100_000
ROUNDS = 5
DAY = b"20415"  # the value stored with each id: the day of the first visit, a small integer

# A structure: (member -> check-and-set command, member -> command that deletes it again).
Encoder = Callable[[bytes], bytes]


def resp(*parts: bytes) -> bytes:
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def encode(ids: list[bytes], form: str) -> list[bytes]:
    return ids if form == "bin" else [i.hex().encode() for i in ids]


def structures(form: str) -> dict[str, tuple[Encoder, Encoder]]:
    """Name -> (check-and-set of a member, delete of that member); members already in ``form``."""
    raw: Callable[[bytes], bytes] = (lambda m: m) if form == "bin" else (lambda m: bytes.fromhex(m.decode()))
    out: dict[str, tuple[Encoder, Encoder]] = {
        "flat SETNX": (lambda m: resp(b"SET", m, DAY, b"NX"), lambda m: resp(b"DEL", m)),
    }
    for bits in PARTITION_BITS:
        mask = (1 << bits) - 1

        def key(m: bytes, mask: int = mask) -> bytes:
            return b"h:%d" % (int.from_bytes(raw(m), "big") & mask)

        out[f"hash 2^{bits} HSETNX"] = (
            lambda m, key=key: resp(b"HSETNX", key(m), m, DAY),
            lambda m, key=key: resp(b"HDEL", key(m), m),
        )
    out["set SADD"] = (lambda m: resp(b"SADD", b"s", m), lambda m: resp(b"SREM", b"s", m))
    out["zset ZADD NX"] = (lambda m: resp(b"ZADD", b"z", b"NX", DAY, m), lambda m: resp(b"ZREM", b"z", m))
    return out


class Wire:
    """A raw connection: sends pre-encoded commands in batches, counts the replies equal to ``want``."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.reader = hiredis.Reader()

    def send(self, commands: list[bytes]) -> list[int]:
        """Run the commands pipelined in batches; returns the integer-ish replies (OK/nil as 1/0)."""
        replies: list[int] = []
        for first in range(0, len(commands), BATCH):
            batch = commands[first : first + BATCH]
            self.sock.sendall(b"".join(batch))
            got = 0
            while got < len(batch):
                self.reader.feed(self.sock.recv(1 << 20))
                while (reply := self.reader.gets()) is not False:
                    replies.append(1 if reply in (b"OK", 1) else 0)
                    got += 1
        return replies


def timed(wire: Wire, commands: list[bytes], expect: int) -> float:
    start = time.perf_counter()
    replies = wire.send(commands)
    elapsed = time.perf_counter() - start
    if any(r != expect for r in replies):
        raise AssertionError(f"unexpected check-and-set reply (wanted {expect})")
    return len(commands) / elapsed


class Case:
    """One structure in one id form, loaded into its own database of its form's server."""

    def __init__(self, name: str, form: str, db: int, structure: tuple[Encoder, Encoder], sample: list[bytes]) -> None:
        self.name, self.form, self.db = name, form, db
        cas, delete = structure
        self.cas = cas
        self.sample_cas = [cas(m) for m in sample]
        self.sample_delete = [delete(m) for m in sample]
        self.figures = {"bytes_per_id": 0.0, "miss_ops": 0.0, "hit_ops": 0.0}

    def load(self, client: redis.Redis, wire: Wire, members: list[bytes]) -> None:
        """Bytes per id: the used_memory delta of storing every id (each database has its own dict)."""
        wire.send([resp(b"SELECT", b"%d" % self.db)])
        before = client.info("memory")["used_memory"]
        timed(wire, [self.cas(m) for m in members], expect=1)
        self.figures["bytes_per_id"] = (client.info("memory")["used_memory"] - before) / len(members)
        wire.send(self.sample_delete)

    def round(self, wire: Wire) -> None:
        """One throughput round: the sample as misses, again as hits, then deleted again."""
        wire.send([resp(b"SELECT", b"%d" % self.db)])
        self.figures["miss_ops"] = max(self.figures["miss_ops"], timed(wire, self.sample_cas, expect=1))
        self.figures["hit_ops"] = max(self.figures["hit_ops"], timed(wire, self.sample_cas, expect=0))
        wire.send(self.sample_delete)


def table(rows: list[dict], n: int, sample: int) -> str:
    flat = {r["form"]: r for r in rows if r["structure"] == "flat SETNX"}
    lines = [
        f"{n:,} random 128-bit ids; {json.dumps(SERVER_CONFIG)}; pipelined batches of {BATCH}; "
        f"throughput best of {ROUNDS} rounds on {sample:,} ids.",
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
    sample_ids = rng.sample(ids, min(SAMPLE, len(ids)))
    cases: list[Case] = []
    with PrivateRedis() as hex_server, PrivateRedis() as bin_server:
        servers = {"hex": hex_server, "bin": bin_server}
        wires = {form: Wire(server.port) for form, server in servers.items()}
        for form, server in servers.items():
            client = redis.Redis.from_url(server.url)
            for name, value in SERVER_CONFIG.items():
                client.config_set(name, value)
            members = encode(ids, form)
            for db, (name, structure) in enumerate(structures(form).items()):
                case = Case(name, form, db, structure, encode(sample_ids, form))
                case.load(client, wires[form], members)
                cases.append(case)
                print(f"loaded {name:18} {form}: {case.figures['bytes_per_id']:6.1f} B/id", flush=True)
        version = client.info("server")["redis_version"]
        # Throughput rounds interleave every case, so all see the same load on this shared machine.
        for number in range(ROUNDS):
            for case in cases:
                case.round(wires[case.form])
            print(f"round {number + 1}/{ROUNDS} done", flush=True)
    rows = [
        {"structure": c.name, "form": c.form, "id_bytes": 16 if c.form == "bin" else 32, **c.figures} for c in cases
    ]
    harness.RESULTS.mkdir(exist_ok=True)
    default = next(r for r in rows if r["structure"] == f"hash 2^{DEFAULT_BITS} HSETNX" and r["form"] == "bin")
    flat = next(r for r in rows if r["structure"] == "flat SETNX" and r["form"] == "bin")
    verdict = {
        "default": f"hash 2^{DEFAULT_BITS} HSETNX, bin",
        "bytes_beyond_id": default["bytes_per_id"] - default["id_bytes"],
        "miss_vs_flat": default["miss_ops"] / flat["miss_ops"],
    }
    verdict["meets_target"] = verdict["bytes_beyond_id"] <= 40 and verdict["miss_vs_flat"] >= 0.8
    meta = {
        "ids": args.ids,
        "sample": len(sample_ids),
        "rounds": ROUNDS,
        "redis": version,
        "cpus": os.cpu_count(),
        "server_config": SERVER_CONFIG,
    }
    figures = {**meta, "verdict": verdict, "rows": rows}
    (harness.RESULTS / "membership.json").write_text(json.dumps(figures, indent=2) + "\n")
    (harness.RESULTS / "membership.md").write_text(
        table(rows, args.ids, len(sample_ids)) + f"\nDefault: {json.dumps(verdict)}\n"
    )
    plot(rows, args.ids, harness.RESULTS / "membership.png")
    print(table(rows, args.ids, len(sample_ids)))
    print("default:", json.dumps(verdict))


if __name__ == "__main__":
    main()
