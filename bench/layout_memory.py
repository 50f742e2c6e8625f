"""Bytes per user of the two largest per-user families in this release's layout (a key per user) and
in a per-partition layout (a few keys per hash tag, the user a field), each written with plain
commands into a private redis-server and measured by its ``used_memory`` (key, value, the key's
entries in the keyspace and its TTL): would moving a page view's per-user state into per-partition
structures, as a cluster-spread and fixed-KEYS design would, halve a user's memory?

- viewer: a hash per user (its day's and week's views and its display name, with a TTL), against
  per partition a hash of user -> views per period and one of user -> name;
- session: a list per user (its one view's entry, with a TTL), against per partition a hash of
  user -> entries and a sorted set of user -> session end, which a prune would need in place of
  each list's TTL (Redis 7.0 has no per-field expiry).

A hash or sorted set of more than 128 fields leaves the compact listpack encoding for a hash table
(and a skip list), which costs about what a key of its own costs; a per-user hash of three fields
stays a listpack. So the per-partition layout is measured twice: with the 16 partitions last seen
uses, and with a bucket per ``COMPACT`` users, as many as keeps every structure a listpack (a
number of keys that grows with the users, and a batch's calls with it).

    python -m bench.layout_memory                 # 100,000 users over 16 partitions
    python -m bench.layout_memory --users 2000    # smoke

Writes bench/results/layout_memory.json and .md.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator

import redis

from activity.store import sessions
from bench import harness
from project.redis_server import PrivateRedis

DAY, WEEK = "d:20261201", "w:2026W49"
TS = 1764600000.123456
TTL = 9 * 86400
PER_PIPELINE = 2000
COMPACT = 100  # users per bucket, under the 128 fields of a listpack

Writer = Callable[[redis.client.Pipeline, str, int], None]


def entry(user: str) -> str:
    return sessions.entry(f"/p/{int(user) % 500}", TS)


def viewer_per_user(pipe: redis.client.Pipeline, user: str, _: int) -> None:
    pipe.hset(f"{{pv}}:viewer:{user}", mapping={DAY: 1, WEEK: 1, "name": user})
    pipe.expire(f"{{pv}}:viewer:{user}", TTL)


def viewer_per_partition(pipe: redis.client.Pipeline, user: str, partition: int) -> None:
    pipe.hset(f"{{pv:{partition}}}:views:{DAY}", user, 1)
    pipe.hset(f"{{pv:{partition}}}:views:{WEEK}", user, 1)
    pipe.hset(f"{{pv:{partition}}}:names", user, user)


def session_per_user(pipe: redis.client.Pipeline, user: str, _: int) -> None:
    pipe.rpush(f"{{ses}}:session:{user}", entry(user))
    pipe.pexpire(f"{{ses}}:session:{user}", 60_000)


def session_per_partition(pipe: redis.client.Pipeline, user: str, partition: int) -> None:
    pipe.hset(f"{{ses:{partition}}}:sessions", user, entry(user))
    pipe.zadd(f"{{ses:{partition}}}:ends", {user: TS + 60})


LAYOUTS: dict[str, tuple[Writer, Writer]] = {
    "viewer": (viewer_per_user, viewer_per_partition),
    "session": (session_per_user, session_per_partition),
}


def users(count: int, partitions: int) -> Iterator[tuple[str, int]]:
    for i in range(count):
        user = str(100_000 + i)
        yield user, i % partitions


def bytes_per_user(client: redis.Redis, write: Writer, count: int, partitions: int) -> float:
    """``used_memory`` grown by writing ``count`` users with ``write``, per user (the server emptied
    before and after)."""
    client.flushall()
    before = client.info("memory")["used_memory"]
    pipe = client.pipeline(transaction=False)
    for user, partition in users(count, partitions):
        write(pipe, user, partition)
        if len(pipe) >= PER_PIPELINE:
            pipe.execute()
    pipe.execute()
    grown = client.info("memory")["used_memory"] - before
    client.flushall()
    return grown / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=16)
    args = parser.parse_args()
    buckets = max(-(-args.users // COMPACT), args.partitions)
    results: dict[str, dict[str, float]] = {}
    with PrivateRedis() as server, redis.Redis.from_url(server.url) as client:
        for family, (per_user, per_partition) in LAYOUTS.items():
            results[family] = {
                "per_user": bytes_per_user(client, per_user, args.users, args.partitions),
                "per_partition": bytes_per_user(client, per_partition, args.users, args.partitions),
                "per_bucket": bytes_per_user(client, per_partition, args.users, buckets),
            }
    table = [["family", "a key per user", f"{args.partitions} partitions", f"{buckets:,} buckets"]]
    for family, sizes in results.items():
        per_user = sizes["per_user"]
        table.append(
            [family, f"{per_user:.0f} B"]
            + [f"{sizes[kind]:.0f} B ({sizes[kind] / per_user:.2f}x)" for kind in ("per_partition", "per_bucket")]
        )
    notes = (
        f"Bytes per user: {args.users:,} users, used_memory grown by writing each layout into an empty private "
        f"redis-server (its default encodings); buckets of {COMPACT} users stay listpacks. "
        f"Command: `python -m bench.layout_memory --users {args.users}`."
    )
    harness.write(
        "layout_memory",
        {"users": args.users, "partitions": args.partitions, "buckets": buckets, "bytes": results},
        table,
        notes,
    )


if __name__ == "__main__":
    main()
