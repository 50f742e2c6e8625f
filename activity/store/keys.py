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


# --- what the sweep job may find without a TTL ------------------------------------------------


def long_lived() -> frozenset[str]:
    """The short list of keys that live without a TTL on purpose; the sweep never touches them."""
    return frozenset({last_seen(), last_seen_dirty(), last_seen_claimed()})


# Key families (the part after the prefix a key starts with) and the TTL in seconds the sweep gives
# one found without a TTL; 0 means delete it (a lock with no TTL would block its job forever).
# Keys of no listed family get ``ACTIVITY_SWEEP_DEFAULT_TTL``.
SWEEP_TTL_BY_FAMILY: dict[str, int] = {
    "lock:": 0,
    "cache:": 300,
}


def sweep_pattern() -> str:
    """SCAN MATCH pattern for every key under the prefix (glob characters in the prefix escaped)."""
    escaped = "".join(f"\\{char}" if char in "*?[]\\" else char for char in prefix())
    return f"{escaped}*"


def stray_ttl(key: str, default: int) -> int | None:
    """TTL in seconds the sweep gives ``key`` when it has none (0: delete); None: leave it alone."""
    if key in long_lived():
        return None
    rest = key[len(prefix()) :]
    return next((ttl for family, ttl in SWEEP_TTL_BY_FAMILY.items() if rest.startswith(family)), default)
