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


# --- group views: every key tagged {grp}, so one Lua call or MULTI may touch any of them ---------
# Tagged apart from {ls}: the build reads last seen in its own round trip (see store/groups.py).


def group_family() -> str:
    """SCAN pattern of the group-view family; every key in it has a TTL (``sweep`` removes strays)."""
    return f"{prefix()}{{grp}}:*"


def group_view(group_id: int) -> str:
    """Sorted set: member = user id, score = last seen (-1 = never seen). TTL GROUP_VIEW_TTL."""
    return f"{prefix()}{{grp}}:view:{group_id}"


def group_view_build(group_id: int, token: str) -> str:
    """Sorted set: a view being built, RENAMEd over the view when complete. Short TTL."""
    return f"{prefix()}{{grp}}:build:{group_id}:{token}"


def group_epoch(group_id: int) -> str:
    """String counter bumped on each membership change, so a build that raced one is discarded."""
    return f"{prefix()}{{grp}}:epoch:{group_id}"


def user_groups(user: str) -> str:
    """Set: ids of the groups of ``user`` whose views were built; TTL outlives those views."""
    return f"{prefix()}{{grp}}:user:{user}"
