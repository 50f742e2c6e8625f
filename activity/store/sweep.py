"""The sweep's Redis side: SCAN the service's prefix and repair keys found without a TTL.

Which TTL a stray key gets (or whether it is deleted, or left alone as one of the documented
long-lived keys) is its family's lifetime, declared on its builder in ``keys.py``
(``keys.stray_ttl``): the same declaration the writers' TTLs are documented by.
"""

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
    """SCAN the prefix ``count`` keys per step; each step repairs the keys it found without a TTL.

    Two round trips per step: the SCAN, then one pipeline of ``expire_if_persistent`` calls (the
    script checks the TTL itself, atomically, one key per call so Cluster slots do not matter). On
    a cluster the steps walk every primary in turn.
    Per-day keys get the TTL left to their day at ``now``; keys of no family ``default_ttl``.
    Keys outside the prefix are never touched, even if the MATCH pattern let one through.
    ``dry_run`` reads each candidate's PTTL instead, and reports what the repair would do.
    """
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
