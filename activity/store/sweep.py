"""The sweep's Redis side: SCAN the prefix and repair keys found without a TTL, as their family in
``keys.py`` declares (a TTL, deletion, or left alone)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from activity.store import keys
from activity.store.client import Client, scan_steps
from activity.store.scripts import LuaScript

EXPIRE_IF_PERSISTENT = LuaScript("expire_if_persistent")


@dataclass(frozen=True, slots=True)
class SweepStep:
    scanned: int
    long_lived: int
    repaired: list[str]
    deleted: list[str]


def sweep(client: Client, count: int, default_ttl: int, now: float, dry_run: bool = False) -> Iterator[SweepStep]:
    """SCAN the prefix ``count`` keys a step, repairing what each step found without a TTL (keys of
    no family get ``default_ttl``). Two round trips a step; the repair checks the TTL itself,
    atomically, so a key given one meanwhile is left. ``dry_run`` reads PTTLs and changes nothing."""
    prefix = keys.prefix()
    for found in scan_steps(client, keys.sweep_pattern(), count):
        own = [key for key in found if key.startswith(prefix)]
        ttls = {key: keys.stray_ttl(key, now, default_ttl) for key in own}
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
            long_lived=len(own) - len(fixes),
            repaired=[key for key in fixed if fixes[key] > 0],
            deleted=[key for key in fixed if fixes[key] == 0],
        )


def keyspace_size(client: Client) -> int:
    """Keys in the database (every prefix; on a cluster redis-py sums every primary's): what a full
    SCAN walks."""
    return client.dbsize()
