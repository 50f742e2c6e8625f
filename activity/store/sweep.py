"""The sweep's Redis side: SCAN the prefix and repair keys found without a TTL, as their family in
``keys.py`` declares (a TTL, deletion, or left alone); merge the legacy first-visit hashes it finds
into their generation."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from activity.store import audience, families, keys, lifetimes
from activity.store.client import Client, scan_steps
from activity.store.scripts import LuaScript

EXPIRE_IF_PERSISTENT = LuaScript("expire_if_persistent")


@dataclass(frozen=True, slots=True)
class SweepStep:
    scanned: int
    long_lived: int
    repaired: list[str]
    deleted: list[str]
    merged: list[str]  # legacy first-visit hashes merged into their shard's current generation


def sweep(client: Client, count: int, default_ttl: int, now: float, dry_run: bool = False) -> Iterator[SweepStep]:
    """SCAN the prefix ``count`` keys a step, repairing what each step found without a TTL (keys of
    no family get ``default_ttl``). Two round trips a step; the repair checks the TTL itself,
    atomically, so a key given one meanwhile is left. A legacy first-visit hash is merged into its
    shard's current generation and deleted, whatever its TTL (one call empties one; a larger one
    takes a call per ``audience.MERGE_STEP`` entries). ``dry_run`` reads PTTLs and changes nothing."""
    prefix = keys.prefix()
    for found in scan_steps(client, families.sweep_pattern(), count):
        own = [key for key in found if key.startswith(prefix)]
        legacy = {key: shard for key in own if (shard := _legacy_shard(key)) is not None}
        if not dry_run:
            _merge(client, legacy, now)
        ttls = {key: families.stray_ttl(key, now, default_ttl) for key in own if key not in legacy}
        fixes = {key: ttl * 1000 for key, ttl in ttls.items() if ttl is not None}
        fixed: list[str] = []
        if fixes:
            pipe = client.pipeline(transaction=False)
            for key, ttl_ms in fixes.items():
                if dry_run:
                    pipe.pttl(key)
                else:
                    pipe.script(EXPIRE_IF_PERSISTENT, [key], [ttl_ms])
            persistent = -1 if dry_run else 1  # PTTL of a key without a TTL; the script's "done"
            fixed = [key for key, reply in zip(fixes, pipe.execute(), strict=True) if reply == persistent]
        yield SweepStep(
            scanned=len(own),
            long_lived=len(ttls) - len(fixes),
            repaired=[key for key in fixed if fixes[key] > 0],
            deleted=[key for key in fixed if fixes[key] == 0],
            merged=list(legacy),
        )


def _legacy_shard(key: str) -> int | None:
    """The shard of a legacy first-visit hash; None for any other key."""
    found = families.family_of(key)
    return int(found[1]["shard"]) if found and found[0].lifetime is lifetimes.MERGED else None


def _merge(client: Client, legacy: dict[str, int], now: float) -> None:
    """Merge the legacy hashes (key -> shard) in one round trip, then again those not emptied yet."""
    while legacy:
        pipe = client.pipeline(transaction=False)
        left = {key: audience.queue_merge_legacy(pipe, key, shard, now) for key, shard in legacy.items()}
        pipe.execute()
        legacy = {key: shard for key, shard in legacy.items() if left[key].value}


def keyspace_size(client: Client) -> int:
    """Keys in the database (every prefix; on a cluster redis-py sums every primary's): what a full
    SCAN walks."""
    return client.dbsize()
