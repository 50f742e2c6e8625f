"""Audience figures: online now, active users, new and unique visitors, and the per-day rollup.

The same figures serve ``GET /api/v1/stats/``, the dashboard, Python callers and the rollup job.
Days are UTC days; weeks start on Monday; "this week" and "this month" run up to today.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from django.utils import timezone

from activity import clock, conf
from activity.models import DailyRollup
from activity.store import keys
from activity.store import last_seen as last_seen_store
from activity.store import sessions as sessions_store
from activity.store import visitors as store
from activity.store.client import get_client
from activity.store.locks import Lock
from activity.store.scripts import Pipeline

ROLLUP_LOCK_MS = 60_000


class DayOutOfRange(ValueError):
    """The day is in the future or its Redis figures have already expired."""


@dataclass(frozen=True, slots=True)
class Stats:
    day: date
    online: int
    active_day: int
    active_week: int
    active_month: int
    new_visitors_day: int
    unique_visitors_day: int
    unique_visitors_week: int
    unique_visitors_month: int

    def as_api(self) -> dict[str, Any]:
        """The body of ``GET /api/v1/stats/`` (API.md)."""
        return {
            "online": self.online,
            "active": {"day": self.active_day, "week": self.active_week, "month": self.active_month},
            "new_visitors": {"day": self.new_visitors_day},
            "unique_visitors": {
                "day": self.unique_visitors_day,
                "week": self.unique_visitors_week,
                "month": self.unique_visitors_month,
            },
            "day": self.day.isoformat(),
        }


def today() -> date:
    return store.day_of(clock.now())


def week_days(day: date) -> list[date]:
    """Monday of ``day``'s ISO week up to ``day``."""
    return [day - timedelta(days=n) for n in range(day.weekday(), -1, -1)]


def month_days(day: date) -> list[date]:
    """The first of ``day``'s month up to ``day``."""
    return [day.replace(day=n) for n in range(1, day.day + 1)]


def stats() -> Stats:
    """Today's figures. One round trip: every read, the online count included, in one pipeline."""
    now = clock.now()
    day = store.day_of(now)
    cache_ms = conf.settings.STATS_CACHE_TTL * 1000
    pipe = Pipeline(get_client())
    online_at = len(pipe)
    last_seen_store.count_since(pipe, now - conf.settings.ONLINE_WINDOW)
    reads = {
        "active_day": store.queue_active_day(pipe, day),
        "active_week": store.queue_active_union(pipe, "week", week_days(day), cache_ms),
        "active_month": store.queue_active_union(pipe, "month", month_days(day), cache_ms),
        "new_visitors_day": store.queue_new_visitors(pipe, day),
        "unique_visitors_day": store.queue_unique_day(pipe, day),
        "unique_visitors_week": store.queue_unique_union(pipe, "week", week_days(day), cache_ms),
        "unique_visitors_month": store.queue_unique_union(pipe, "month", month_days(day), cache_ms),
    }
    results = pipe.execute()
    figures = {name: store.total(results, indexes) for name, indexes in reads.items()}
    return Stats(day=day, online=int(results[online_at]), **figures)


def rollup_day(day: date) -> DailyRollup | None:
    """Write ``day``'s figures to its ``DailyRollup`` row; None when another run holds the day's lock.

    Idempotent and safe to retry: new-visitor counters are harvested (GETDEL) into per-day
    accumulators in Redis, and the row gets the accumulators' totals, so a run that dies between the
    harvest and the database write loses nothing, and a rerun writes the same (or later) figures.
    Sessions started and page views come from the navigation-session counters of that day.
    """
    now = clock.now()
    if day > store.day_of(now) or store.day_ttl(day, now) <= 0:
        raise DayOutOfRange(f"{day} is not between today and {store.KEEP_DAYS} days ago")
    client = get_client()
    lock = Lock(client, keys.lock(f"rollup:{store.day_name(day)}"), ROLLUP_LOCK_MS)
    if not lock.acquire():
        return None
    try:
        pipe = Pipeline(client)
        new_at = store.queue_harvest(pipe, day, now)
        active_at = store.queue_active_day(pipe, day)
        unique_at = store.queue_unique_day(pipe, day)
        results = pipe.execute()
        sessions, page_views = sessions_store.day_counts(client, day)
        row = DailyRollup(
            day=day,
            sessions=sessions,
            page_views=page_views,
            active_users=store.total(results, active_at),
            new_visitors=store.total(results, new_at),
            unique_visitors=store.total(results, unique_at),
            updated_at=timezone.now(),
        )
        DailyRollup.objects.bulk_create(
            [row],
            update_conflicts=True,
            unique_fields=["day"],
            update_fields=["active_users", "sessions", "page_views", "new_visitors", "unique_visitors", "updated_at"],
        )
        return DailyRollup.objects.get(day=day)
    finally:
        lock.release()
