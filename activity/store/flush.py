"""The Redis side of the database hand-over: claim, acknowledge, reap, prune, sweep, status.

Changed members wait in ``dirty`` (written by ``zadd_unless_smaller``); a flush moves a batch into
``claimed`` atomically, writes it to the database, then acknowledges it. A member is therefore in
``dirty`` or ``claimed`` from its change until a committed flush acknowledged it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import redis

from activity.store import keys
from activity.store.scripts import LuaScript, Pipeline

CLAIM = LuaScript("flush_claim")
ACK = LuaScript("flush_ack")
REAP = LuaScript("flush_reap")
PRUNE = LuaScript("prune_last_seen")
EXPIRE_IF_PERSISTENT = LuaScript("expire_if_persistent")


@dataclass(frozen=True, slots=True)
class Backlog:
    dirty: int
    claimed: int
    oldest: float | None  # dirty: time of the first unflushed change; claimed: claim time


def claim(client: redis.Redis, now: float, limit: int) -> tuple[str, list[tuple[str, float]]]:
    """Claim up to ``limit`` changed members, oldest change first.

    Returns the claim time (as sent; ``ack`` needs the same string) and (member, last seen) pairs.
    """
    claim_time = repr(float(now))
    flat = CLAIM(client, [keys.last_seen(), keys.last_seen_dirty(), keys.last_seen_claimed()], [claim_time, limit])
    return claim_time, [(flat[i], float(flat[i + 1])) for i in range(0, len(flat), 2)]


def ack(client: redis.Redis, claim_time: str, members: list[str]) -> int:
    """Remove members whose database write committed, if they still carry ``claim_time``."""
    if not members:
        return 0
    return ACK(client, [keys.last_seen_claimed()], [claim_time, *members])


def reap(client: redis.Redis, older_than: float, step: int) -> int:
    """Hand claims made at or before ``older_than`` back to ``dirty``, ``step`` per call."""
    total = 0
    while True:
        moved = REAP(client, [keys.last_seen_claimed(), keys.last_seen_dirty()], [repr(float(older_than)), step])
        total += moved
        if moved < step:
            return total


def prune(client: redis.Redis, cutoff: float, step: int) -> tuple[int, int]:
    """Remove members last seen before ``cutoff`` unless still unflushed; returns (removed, kept)."""
    removed = kept = 0
    script_keys = [keys.last_seen(), keys.last_seen_dirty(), keys.last_seen_claimed()]
    while True:
        examined, gone = PRUNE(client, script_keys, [repr(float(cutoff)), kept, step])
        removed += gone
        kept += examined - gone
        if examined < step:
            return removed, kept


def backlog(client: redis.Redis) -> Backlog:
    """Sizes of ``dirty`` and ``claimed`` and the oldest score in either; one round trip."""
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.last_seen_dirty())
    pipe.zcard(keys.last_seen_claimed())
    pipe.zrange(keys.last_seen_dirty(), 0, 0, withscores=True)
    pipe.zrange(keys.last_seen_claimed(), 0, 0, withscores=True)
    dirty, claimed, oldest_dirty, oldest_claimed = pipe.execute()
    scores = [rows[0][1] for rows in (oldest_dirty, oldest_claimed) if rows]
    return Backlog(dirty=dirty, claimed=claimed, oldest=min(scores) if scores else None)


@dataclass(frozen=True, slots=True)
class SweepStep:
    scanned: int
    long_lived: int
    repaired: list[str]
    deleted: list[str]


def sweep(client: redis.Redis, count: int, default_ttl: int) -> Iterator[SweepStep]:
    """SCAN the prefix ``count`` keys per step; each step repairs the keys it found without a TTL.

    Two round trips per step: the SCAN, then one pipeline of ``expire_if_persistent`` calls (the
    script checks the TTL itself, atomically, one key per call so Cluster slots do not matter).
    Keys outside the prefix are never touched, even if the MATCH pattern let one through.
    """
    prefix = keys.prefix()
    cursor = 0
    while True:
        cursor, found = client.scan(cursor, match=keys.sweep_pattern(), count=count)
        own = [key for key in found if key.startswith(prefix)]
        ttls = {key: keys.stray_ttl(key, default_ttl) for key in own}
        fixes = {key: ttl * 1000 for key, ttl in ttls.items() if ttl is not None}
        fixed: list[str] = []
        if fixes:
            pipe = Pipeline(client)
            for key, ttl_ms in fixes.items():
                pipe.script(EXPIRE_IF_PERSISTENT, [key], [ttl_ms])
            fixed = [key for key, done in zip(fixes, pipe.execute(), strict=True) if done == 1]
        yield SweepStep(
            scanned=len(own),
            long_lived=len(own) - len(fixes),
            repaired=[key for key in fixed if fixes[key] > 0],
            deleted=[key for key in fixed if fixes[key] == 0],
        )
        if cursor == 0:
            return
