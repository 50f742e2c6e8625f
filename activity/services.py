"""What the entry points call: the API views, the middleware, Celery tasks and other teams' jobs.

Recording events, last seen, who is online, navigation sessions and page statistics, and the
service's health. Reports (``activity.reports``), audience figures (``activity.audience``) and
group views (``activity.groups``) have modules of their own.

Every function here takes and returns plain values; none names a Redis key (that is the store's
job), and each costs a bounded number of Redis round trips, stated in its docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date

from django.db import DatabaseError, connection

from activity import clock, conf, groups
from activity.calendar import day_of
from activity.errors import StoreUnavailable
from activity.events import Event
from activity.store import actives as actives_store
from activity.store import groups as group_store
from activity.store import health as health_store
from activity.store import last_seen as last_seen_store
from activity.store import sessions as sessions_store
from activity.store import visitors as visitors_store
from activity.store.client import get_client
from activity.store.daily import total
from activity.store.scripts import Pipeline
from activity.store.sessions import PageView, SessionPage


@dataclass(frozen=True, slots=True)
class RecordResult:
    accepted: int
    last_seen_updated: int
    new_visitors: int = 0
    sessions_started: int = 0


@dataclass(frozen=True, slots=True)
class LastSeen:
    user: str
    ts: float
    online: bool


def page_path(path: str | None) -> str | None:
    """The path a page view records, or None when it records none (no path, or an excluded prefix).

    The query string is dropped unless ``ACTIVITY_SESSION_KEEP_QUERY``: it often carries tokens and
    would split one page's counts across many variants.
    """
    if path is None:
        return None
    if not conf.settings.SESSION_KEEP_QUERY:
        path = path.split("?", 1)[0]
    if path.startswith(conf.settings.SESSION_EXCLUDE_PATHS):
        return None
    return path


def record_events(
    events: Sequence[Event], visitors: Sequence[tuple[str, float]] = (), names: Mapping[str, str] | None = None
) -> RecordResult:
    """Record a validated batch in one round trip: one EVALSHA for its last-seen updates (one per
    last-seen partition it touches), one for its page views (events with a path) and the
    visitor/active-user updates, one pipeline.

    ``visitors`` are anonymous visits, (visitor id as 32 hex digits, ts): they count as visitors
    (first visit, unique visitors) but are not users, so they never enter last seen or actives.
    Signed-in users' events count as visits of the user's own visitor id. ``names`` maps user ids
    to usernames where the caller knows them (the middleware does); the reports sort by them.

    The same round trip reads each user's group index; only when a last seen moved and one of
    its users belongs to a materialized group view does a second round trip update those views.
    """
    latest: dict[str, float] = {}
    views: list[PageView] = []
    names = names or {}
    for event in events:
        ts = round(event.ts, 3)  # the API promises millisecond precision
        if ts > latest.get(event.user, -1.0):
            latest[event.user] = ts
        path = page_path(event.path)
        if path is not None:
            views.append(PageView(user=event.user, path=path, ts=ts, name=names.get(event.user)))
    if not latest and not visitors:
        return RecordResult(accepted=0, last_seen_updated=0)
    now = clock.now()
    pipe = Pipeline(get_client())
    moved_at = last_seen_store.queue_update(pipe, latest, now)
    started_at = None
    if views:
        started_at = sessions_store.queue_record(
            pipe, views, conf.settings.SESSION_WINDOW, conf.settings.SESSION_MAX_PAGES, conf.settings.PAGE_STATS_DAYS
        )
    actives = {(event.user, day_of(event.ts)) for event in events}
    visits = {(visitors_store.user_visitor_id(user), day) for user, day in actives}
    visits.update((bytes.fromhex(visitor), day_of(ts)) for visitor, ts in visitors)
    new_at = visitors_store.queue_visits(pipe, visits, now, conf.settings.VISITOR_PARTITION_BITS)
    actives_store.queue_actives(pipe, actives, now, conf.settings.ACTIVE_BITMAP_MAX_ID)
    groups_at = group_store.queue_groups_of(pipe, latest)
    results = pipe.execute()
    moved = total(results, moved_at)
    if moved:
        found = zip(latest, results[groups_at], strict=True)
        groups.propagate(latest, {user: ids for user, ids in found if ids})
    return RecordResult(
        accepted=len(events) + len(visitors),
        last_seen_updated=moved,
        new_visitors=total(results, new_at),
        sessions_started=0 if started_at is None else results[started_at],
    )


def session_page(user: str, page: int = 1, page_size: int = 20) -> SessionPage | None:
    """One page of the user's current navigation session, most recent first; None when the user has
    no live session. One round trip; reads only that page (LRANGE), never the whole list."""
    return sessions_store.page(get_client(), user, page, page_size)


def current_session(user: str) -> list[tuple[str, float]]:
    """Every page of the user's current session as (path, ts), most recent first; [] when none."""
    found = sessions_store.page(get_client(), user, 1, conf.settings.SESSION_MAX_PAGES)
    return [] if found is None else found.views


def sessions_started(day: date) -> int:
    """Navigation sessions started on ``day`` (UTC), while its statistics are kept."""
    return sessions_store.day_counts(get_client(), day)[0]


def page_views(day: date) -> int:
    """Page views recorded on ``day`` (UTC), while its statistics are kept."""
    return sessions_store.day_counts(get_client(), day)[1]


def top_paths(day: date, n: int = 10) -> list[tuple[str, int]]:
    """The ``n`` most viewed paths on ``day`` (UTC) with their view counts, most viewed first."""
    return sessions_store.top_paths(get_client(), day, n)


def is_online(ts: float) -> bool:
    """Whether a last seen at ``ts`` is within the online window of now."""
    return ts >= clock.now() - conf.settings.ONLINE_WINDOW


def last_seen(user: str) -> LastSeen | None:
    """One user's last seen, or None when never seen. One round trip."""
    ts = last_seen_store.get(get_client(), user)
    if ts is None:
        return None
    return LastSeen(user=user, ts=ts, online=is_online(ts))


def last_seen_many(users: Iterable[str]) -> dict[str, float | None]:
    """Last seen of many users (None for never seen). One round trip (ZMSCORE)."""
    return last_seen_store.get_many(get_client(), users)


def online_count(within: int | None = None) -> int:
    """How many users were seen in the last ``within`` seconds (default: the online window)."""
    within = conf.settings.ONLINE_WINDOW if within is None else within
    return last_seen_store.count_since(get_client(), clock.now() - within)


def online_page(
    within: int | None = None, limit: int = 50, after: tuple[float, str] | None = None
) -> list[tuple[str, float]]:
    """A page of online users, most recent first, continuing after the (ts, user) ``after``."""
    within = conf.settings.ONLINE_WINDOW if within is None else within
    return last_seen_store.page_since(get_client(), clock.now() - within, limit, after)


def health() -> dict[str, str]:
    """``ok`` or the error for each part the service needs (Redis, the database); on a Redis
    Cluster also ``redis_cluster``, the cluster's state."""
    parts: dict[str, str] = {}
    try:
        state = health_store.probe(get_client(), clock.now())
        parts["redis"] = "ok"
        if state is not None:
            parts["redis_cluster"] = state
    except StoreUnavailable as error:
        parts["redis"] = f"unavailable: {error}"
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        parts["database"] = "ok"
    except DatabaseError as error:
        parts["database"] = f"unavailable: {error}"
    return parts
