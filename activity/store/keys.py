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
    """String: a lock (SET NX PX with a random token). Always has a TTL. Tagged with its name, so
    the lock and its announcement list share a Cluster slot."""
    return f"{prefix()}lock:{{{name}}}"


def lock_signal(name: str) -> str:
    """List: the lock's release announcements, which waiters BLPOP on (TTL: the lock's)."""
    return f"{lock(name)}:signal"


def health() -> str:
    """String: the health check's write probe (TTL: a few seconds)."""
    return f"{prefix()}health"


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
    # Group views and their indexes always have a TTL; one without is a rogue partial view
    # (the TTL guard can leave one). Deleting is safe: the next read rebuilds it.
    "{grp}:": 0,
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


# --- visitors and audience figures ---------------------------------------------------------------
# "First visit ever" hashes and their per-day new-visitor counters are spread over VISITOR_SHARDS
# hash tags {vis:N} (N = low bits of the visitor id), so a Cluster spreads the membership store over
# several slots while one Lua call still touches one slot: a visitor's partition hash and the
# counter it increments share the shard's tag. Per-day activity keys that are unioned together
# (BITOP / PFMERGE / PFCOUNT over a week or month) share one tag per family: {au} and {uv}.


def visitor_seen(shard: int, partition: int) -> str:
    """Hash: field = 16-byte visitor id, value = day number of the first visit. Long-lived."""
    return f"{prefix()}{{vis:{shard}}}:seen:{partition}"


def new_visitors(shard: int, day: str) -> str:
    """String counter: new visitors on ``day`` (YYYYMMDD) in this shard, until harvested. TTL."""
    return f"{prefix()}{{vis:{shard}}}:new:{day}"


def new_visitors_harvested(shard: int, day: str) -> str:
    """String: new visitors of ``day`` harvested from the counter so far (the rollup's input). TTL."""
    return f"{prefix()}{{vis:{shard}}}:harvested:{day}"


def unique_visitors(day: str) -> str:
    """HyperLogLog: every visitor (user or anonymous) seen on ``day``. TTL."""
    return f"{prefix()}{{uv}}:day:{day}"


def unique_visitors_union(period: str, first: str, last: str) -> str:
    """HyperLogLog: PFMERGE of the days ``first``..``last`` (a week or month so far). Short TTL."""
    return f"{prefix()}{{uv}}:{period}:{first}:{last}"


def active_bits(day: str) -> str:
    """Bitmap: bit N set when the user with integer id N was active on ``day``. TTL."""
    return f"{prefix()}{{au}}:bits:day:{day}"


def active_hll(day: str) -> str:
    """HyperLogLog: active users on ``day`` whose ids are not small integers. TTL."""
    return f"{prefix()}{{au}}:hll:day:{day}"


def active_bits_union(period: str, first: str, last: str) -> str:
    """Bitmap: BITOP OR of the days ``first``..``last``. Short TTL."""
    return f"{prefix()}{{au}}:bits:{period}:{first}:{last}"


def active_hll_union(period: str, first: str, last: str) -> str:
    """HyperLogLog: PFMERGE of the days ``first``..``last``. Short TTL."""
    return f"{prefix()}{{au}}:hll:{period}:{first}:{last}"


# --- navigation sessions and page-view statistics: all tagged {pv} -----------------------------
# One tag because one EVALSHA per batch writes every user's session list together with the shared
# per-day counters, and because the reports' SORT reads the per-user counters and names through
# BY/GET patterns, which Redis Cluster allows only within the sorted key's slot.

PV_TAG = "{pv}"


def session(user: str) -> str:
    """List: the user's current navigation session, oldest page first (TTL = session window)."""
    return f"{prefix()}{PV_TAG}:session:{user}"


def display_name(user: str) -> str:
    """String: the user's username, or the user id until one is known (TTL: week statistics)."""
    return f"{prefix()}{PV_TAG}:name:{user}"


def display_name_pattern() -> str:
    """SORT BY/GET pattern over ``display_name``."""
    return display_name("*")


def sessions_started(day: str) -> str:
    """String counter: sessions started on ``day`` (YYYYMMDD, UTC) (TTL: day statistics)."""
    return f"{prefix()}{PV_TAG}:started:{day}"


def page_views(day: str) -> str:
    """String counter: page views on ``day`` (TTL: day statistics)."""
    return f"{prefix()}{PV_TAG}:views:{day}"


def path_views(day: str) -> str:
    """Sorted set: member = path, score = its page views on ``day`` (TTL: day statistics)."""
    return f"{prefix()}{PV_TAG}:paths:{day}"


def user_views(period: str, user: str) -> str:
    """String counter: one user's page views in ``period`` (``d:YYYYMMDD`` or ``w:YYYYWww``)."""
    return f"{prefix()}{PV_TAG}:uv:{period}:{user}"


def user_views_pattern(period: str) -> str:
    """SORT BY/GET pattern over ``user_views`` of one period."""
    return user_views(period, "*")


def viewers(period: str) -> str:
    """Set: users with at least one page view in ``period`` (TTL: as the period's counters)."""
    return f"{prefix()}{PV_TAG}:viewers:{period}"


# --- cached reports: tagged {pv} too, so SORT's source, patterns and STORE share one slot ------


def report_rows(report_id: str) -> str:
    """List: a report's rows as SORT ... STORE wrote them (TTL = report TTL + stale grace)."""
    return f"{prefix()}{PV_TAG}:report:{report_id}:rows"


def report_meta(report_id: str) -> str:
    """String: when the report was built (epoch seconds); same TTL as its rows, so it also marks
    a built-but-empty report (SORT ... STORE of nothing stores no list)."""
    return f"{prefix()}{PV_TAG}:report:{report_id}:meta"


def reports_read() -> str:
    """Sorted set: report = name:period, score = last read time; the refresh job's work list
    (TTL: the read window, renewed by every read)."""
    return f"{prefix()}{PV_TAG}:reports:read"


# --- group views: every key tagged {grp}, so one Lua call or MULTI may touch any of them ---------
# Tagged apart from {ls}: the build reads last seen in its own round trip (see store/groups.py).


def group_family() -> str:
    """SCAN pattern of the group-view family; every key in it has a TTL (``sweep`` deletes strays)."""
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
