"""The health check's Redis probe, and what the system checks read of the server's configuration."""

from __future__ import annotations

import redis

from activity.errors import StoreUnavailable
from activity.store import keys
from activity.store.client import Client, cluster_state, is_cluster

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


# What the system checks read of the server's configuration: its eviction policy and persistence.
CONFIG_NAMES = ("maxmemory-policy", "appendonly", "save")


def server_config(client: Client) -> dict[str, str]:
    """The ``CONFIG_NAMES`` the server lets us read (one round trip; on a cluster, the node the
    client asks first, the others assumed alike). A name is left out when CONFIG GET is refused:
    managed Redis often renames or disables CONFIG, and an ACL may forbid it."""
    if is_cluster(client):
        node = {"target_nodes": client.get_default_node()}
        replies = []
        for name in CONFIG_NAMES:
            try:
                replies.append(client.config_get(name, **node))
            except redis.ResponseError as error:
                replies.append(error)
    else:
        pipe = client.pipeline(transaction=False)
        for name in CONFIG_NAMES:
            pipe.config_get(name)
        replies = pipe.execute(raise_on_error=False)
    found: dict[str, str] = {}
    for name, reply in zip(CONFIG_NAMES, replies, strict=True):
        if isinstance(reply, Exception):
            if not isinstance(reply, redis.ResponseError):
                raise reply  # StoreUnavailable: the server cannot answer now
            continue
        if name in reply:
            found[name] = reply[name]
    return found
