"""The health check's Redis probe."""

from __future__ import annotations

from activity.store import keys
from activity.store.client import Client

PROBE_TTL_MS = 10_000


def probe(client: Client, now: float) -> None:
    """Raise ``StoreUnavailable`` unless Redis takes a write now. A write, not a PING: a server at
    maxmemory or a read-only replica still answers PING while it refuses every write we make."""
    client.set(keys.health(), repr(now), px=PROBE_TTL_MS)
