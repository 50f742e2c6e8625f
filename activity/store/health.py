"""The health check's Redis probe."""

from __future__ import annotations

from activity.errors import StoreUnavailable
from activity.store import keys
from activity.store.client import Client, cluster_state

PROBE_TTL_MS = 10_000


def probe(client: Client, now: float) -> str | None:
    """Raise ``StoreUnavailable`` unless Redis takes a write: a server at maxmemory or a read-only
    replica still answers PING. On a cluster the write reaches one primary, so every primary is asked
    for the cluster's state too; returns that state, None on a standalone server."""
    client.set(keys.health(), repr(now), px=PROBE_TTL_MS)
    state = cluster_state(client)
    if state is not None and not state.startswith("ok"):
        raise StoreUnavailable("CLUSTERDOWN", state)
    return state
