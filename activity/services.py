"""What the entry points call: the API views, the middleware, Celery tasks and other teams' jobs.

Every function here takes and returns plain values; none names a Redis key (that is the store's
job), and each costs a bounded number of Redis round trips, stated in its docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import DatabaseError, connection

from activity import clock, conf
from activity.events import Event
from activity.store import last_seen as last_seen_store
from activity.store import visitors as visitors_store
from activity.store.client import UNAVAILABLE, get_client
from activity.store.scripts import Pipeline


@dataclass(frozen=True, slots=True)
class RecordResult:
    accepted: int
    last_seen_updated: int
    new_visitors: int = 0


@dataclass(frozen=True, slots=True)
class LastSeen:
    user: str
    ts: float
    online: bool


def record_events(events: Sequence[Event], visitors: Sequence[tuple[str, float]] = ()) -> RecordResult:
    """Record a validated batch in one round trip (one EVALSHA for all of its last-seen updates).

    ``visitors`` are anonymous visits, (visitor id as 32 hex digits, ts): they count as visitors
    (first visit, unique visitors) but are not users, so they never enter last seen or actives.
    Signed-in users' events count as visits of the user's own visitor id.
    """
    latest: dict[str, float] = {}
    for event in events:
        ts = round(event.ts, 3)  # the API promises millisecond precision
        if ts > latest.get(event.user, -1.0):
            latest[event.user] = ts
    if not latest and not visitors:
        return RecordResult(accepted=0, last_seen_updated=0)
    now = clock.now()
    pipe = Pipeline(get_client())
    moved_at = last_seen_store.queue_update(pipe, latest, now) if latest else None
    actives = {(event.user, visitors_store.day_of(event.ts)) for event in events}
    visits = {(visitors_store.user_visitor_id(user), day) for user, day in actives}
    visits.update((bytes.fromhex(visitor), visitors_store.day_of(ts)) for visitor, ts in visitors)
    new_at = visitors_store.queue_visits(pipe, visits, now, conf.settings.VISITOR_PARTITION_BITS)
    visitors_store.queue_actives(pipe, actives, now, conf.settings.ACTIVE_BITMAP_MAX_ID)
    results = pipe.execute()
    return RecordResult(
        accepted=len(events) + len(visitors),
        last_seen_updated=0 if moved_at is None else results[moved_at],
        new_visitors=visitors_store.total(results, new_at),
    )


def last_seen(user: str) -> LastSeen | None:
    """One user's last seen, or None when never seen. One round trip."""
    ts = last_seen_store.get(get_client(), user)
    if ts is None:
        return None
    return LastSeen(user=user, ts=ts, online=ts >= clock.now() - conf.settings.ONLINE_WINDOW)


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
    """``ok`` or the error for each part the service needs (Redis, the database)."""
    parts: dict[str, str] = {}
    try:
        get_client().ping()
        parts["redis"] = "ok"
    except UNAVAILABLE as error:
        parts["redis"] = f"unavailable: {error}"
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        parts["database"] = "ok"
    except DatabaseError as error:
        parts["database"] = f"unavailable: {error}"
    return parts
