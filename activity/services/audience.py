"""Audience figures (online, active users, new and unique visitors, bots and machines) and the daily
rollup: the same figures for ``GET /api/v1/stats/``, the dashboard and Python callers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from django.utils import timezone

from activity import calendar, clock, conf
from activity.errors import DayOutOfRange
from activity.models import DailyRollup
from activity.services import cohorts, funnels, locks
from activity.store import audience as store
from activity.store import sessions as sessions_store
from activity.store.client import get_client
from activity.store.lifetimes import KEEP_DAYS, day_ttl

ROLLUP_LOCK_TTL = 60.0


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
    bots_day: int
    machines_day: int

    def as_api(self) -> dict[str, Any]:
        """The body of ``GET /api/v1/stats/`` (docs/api.md)."""
        return {
            "online": self.online,
            "active": {"day": self.active_day, "week": self.active_week, "month": self.active_month},
            "new_visitors": {"day": self.new_visitors_day},
            "unique_visitors": {
                "day": self.unique_visitors_day,
                "week": self.unique_visitors_week,
                "month": self.unique_visitors_month,
            },
            "bots": {"day": self.bots_day},
            "machines": {"day": self.machines_day},
            "day": self.day.isoformat(),
        }


# The DailyRollup fields a rollup writes (its day aside).
ROLLUP_FIGURES = (
    "active_users",
    "sessions",
    "page_views",
    "new_visitors",
    "unique_visitors",
    "bot_requests",
    "machine_requests",
)


def stats() -> Stats:
    """Today's figures in one round trip. Unique visitors are the anonymous ones plus the active
    users, which keeps signed-in visitors out of the unique-visitor HyperLogLogs an erase cannot reach."""
    now = clock.now()
    day = calendar.day_of(now)
    found = store.today(get_client(), day, now - conf.settings.ONLINE_WINDOW)
    active, unique = found.active, {period: found.anonymous[period] + found.active[period] for period in found.active}
    return Stats(
        day=day,
        online=found.online,
        active_day=active["day"],
        active_week=active["week"],
        active_month=active["month"],
        new_visitors_day=found.new_visitors,
        unique_visitors_day=unique["day"],
        unique_visitors_week=unique["week"],
        unique_visitors_month=unique["month"],
        bots_day=found.bots,
        machines_day=found.machines,
    )


def _check_rollup_day(day: date, now: float) -> None:
    if day > calendar.day_of(now) or day_ttl(day, now) <= 0:
        raise DayOutOfRange(f"{day} is not between today and {KEEP_DAYS} days ago")


def rollup_days(first: date, last: date) -> list[date]:
    """The days from ``first`` to ``last`` included, each one ``rollup_day`` can still compute;
    ``DayOutOfRange`` for a range that is empty or reaches beyond that, before anything is written."""
    if last < first:
        raise DayOutOfRange(f"the range ends ({last}) before it starts ({first})")
    now = clock.now()
    for day in (first, last):  # retention is a window of days: its two ends decide
        _check_rollup_day(day, now)
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def rollup_day(day: date) -> DailyRollup | None:
    """Write ``day``'s figures to its ``DailyRollup`` row, with the calendar zone they were cut in;
    None when another run holds the day's lock. Safe to retry: the row gets the harvest
    accumulators' totals, so a run that dies between the harvest and the write loses nothing, and a
    rerun writes the same or later figures. The retention cells of the day (and of the day about to
    leave Redis) are written too (``cohorts.keep_cells``), and the funnels' periods that became final
    (``funnels.keep_counts``)."""
    now = clock.now()
    _check_rollup_day(day, now)
    with locks.exclusive(f"rollup:{calendar.day_name(day)}", ROLLUP_LOCK_TTL) as acquired:
        if not acquired:
            return None
        client = get_client()
        found = store.harvest(client, day, now)
        sessions, page_views = sessions_store.day_counts(client, day)
        row = DailyRollup(
            day=day,
            sessions=sessions,
            page_views=page_views,
            active_users=found.active,
            new_visitors=found.new_visitors,
            unique_visitors=found.anonymous + found.active,
            bot_requests=found.bots,
            machine_requests=found.machines,
            time_zone=calendar.zone_name(),
            updated_at=timezone.now(),
        )
        DailyRollup.objects.bulk_create(
            [row],
            update_conflicts=True,
            unique_fields=["day"],
            update_fields=[*ROLLUP_FIGURES, "time_zone", "updated_at"],
        )
        cohorts.keep_cells(day, now)
        funnels.keep_counts(now)
        return DailyRollup.objects.get(day=day)
