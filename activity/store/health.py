"""The health check's Redis probe."""

from __future__ import annotations

from activity.errors import StoreUnavailable
from activity.store import keys
from activity.store.client import Client, cluster_state

PROBE_TTL_MS = 10_000


def probe(client: Client, now: float) -> str | None:
    """Raise ``StoreUnavailable`` unless Redis takes a write now. A write, not a PING: a server at
    maxmemory or a read-only replica still answers PING while it refuses every write we make.

    On a cluster the write reaches one slot's primary, so every primary is asked for the cluster's
    state too (a primary down, or one that sees slots uncovered, fails the probe); returns that
    state (``ok: 3 primaries, 16384 of 16384 slots ok``), None on a standalone server.
    """
    client.set(keys.health(), repr(now), px=PROBE_TTL_MS)
    state = cluster_state(client)
    if state is not None and not state.startswith("ok"):
        raise StoreUnavailable("CLUSTERDOWN", state)
    return state
