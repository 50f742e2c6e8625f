"""Every Redis key the service uses is built here.

Keys start with ``ACTIVITY_KEY_PREFIX``. Keys that one Lua script or one MULTI touches together
share a Redis Cluster hash tag (``{...}``) so the service runs unchanged on a Cluster.
"""

from __future__ import annotations

from activity import conf


def prefix() -> str:
    return conf.settings.KEY_PREFIX


# --- last seen: one sorted set plus the "changed since last flush" index, all tagged {ls} ------


def last_seen() -> str:
    """Sorted set: member = user id, score = last-seen epoch seconds. Long-lived."""
    return f"{prefix()}{{ls}}:seen"


def last_seen_dirty() -> str:
    """Sorted set: users whose last seen changed since the last flush, score = first change time."""
    return f"{prefix()}{{ls}}:dirty"


def last_seen_claimed() -> str:
    """Sorted set: users claimed by a running flush, score = claim time (reliable-queue pattern)."""
    return f"{prefix()}{{ls}}:claimed"


def lock(name: str) -> str:
    """String: a lock (SET NX PX with a random token). Always has a TTL."""
    return f"{prefix()}lock:{name}"
