"""What the entry points call: the API views, the middleware, Celery tasks and other teams' jobs.

Every function here takes and returns plain values; none names a Redis key (that is the store's
job), and each costs a bounded number of Redis round trips, stated in its docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import DatabaseError, connection

from activity import clock, conf, groups
from activity.events import Event
from activity.store import groups as group_store
from activity.store import last_seen as last_seen_store
from activity.store.client import UNAVAILABLE, get_client
from activity.store.scripts import Pipeline


@dataclass(frozen=True, slots=True)
class RecordResult:
    accepted: int
    last_seen_updated: int


@dataclass(frozen=True, slots=True)
class LastSeen:
    user: str
    ts: float
    online: bool


def record_events(events: Sequence[Event]) -> RecordResult:
    """Record a validated batch in one round trip (one EVALSHA for all of its last-seen updates).

    The same round trip reads each user's group index; only when a last seen moved and one of
    its users belongs to a materialized group view does a second round trip update those views.
    """
    latest: dict[str, float] = {}
    for event in events:
        ts = round(event.ts, 3)  # the API promises millisecond precision
        if ts > latest.get(event.user, -1.0):
            latest[event.user] = ts
    if not latest:
        return RecordResult(accepted=0, last_seen_updated=0)
    pipe = Pipeline(get_client())
    moved_at = last_seen_store.queue_update(pipe, latest, clock.now())
    groups_at = group_store.queue_groups_of(pipe, latest)
    results = pipe.execute()
    if results[moved_at]:
        groups.propagate(latest, {user: results[i] for user, i in zip(latest, groups_at, strict=True) if results[i]})
    return RecordResult(accepted=len(events), last_seen_updated=results[moved_at])


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
