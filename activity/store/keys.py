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


def report_built(report_id: str) -> str:
    """List: rebuild announcements readers BLPOP on while another client builds (short TTL)."""
    return f"{prefix()}{PV_TAG}:report:{report_id}:built"


def reports_read() -> str:
    """Sorted set: report = name:period, score = last read time; the refresh job's work list
    (TTL: the read window, renewed by every read)."""
    return f"{prefix()}{PV_TAG}:reports:read"
