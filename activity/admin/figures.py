"""The dashboard's figures, taken from the services the API and the jobs use, never computed a
second way: so the page costs a handful of round trips and one indexed query whatever the users."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta

from activity import clock
from activity.models import DailyRollup
from activity.services import audience, flush, groups, live, pages_now, recommendations, reports, sessions

TOP_PATHS = 10
MOST_ACTIVE_ROWS = 10
NEXT_PATHS = 3  # next pages shown per top page
TOP_GROUPS = 10  # groups in the "top groups today" table
DAYS = 30  # days in the charts, today included


@dataclass(frozen=True, slots=True)
class DayFigures:
    day: date
    active_users: int | None  # None: the day has no rollup row (yet)
    page_views: int | None


@dataclass(frozen=True, slots=True)
class WhereNext:
    path: str
    views: int
    next_paths: list[tuple[str, int]]  # (page viewed next, how often), most frequent first


@dataclass(frozen=True, slots=True)
class Overview:
    generated_at: float
    stats: audience.Stats
    days: list[DayFigures]  # oldest first, ending today
    top_paths: list[tuple[str, int]]
    where_next: list[WhereNext]  # for each top page, in the same order
    most_active: reports.Snapshot
    most_active_cache: str  # hit, stale or miss, as the report API's X-Cache
    flush: flush.FlushStatus
    top_groups: groups.TopGroups
    pages_now: list[dict[str, object]]  # the pages the people online are on, most first


def daily_figures(today: date, stats: audience.Stats, days: int) -> list[DayFigures]:
    """The last ``days`` days: rollup rows (one query), then today's live figures."""
    first = today - timedelta(days=days - 1)
    rows = {
        day: (active, views)
        for day, active, views in DailyRollup.objects.filter(day__gte=first, day__lt=today).values_list(
            "day", "active_users", "page_views"
        )
    }
    figures = []
    for n in range(days - 1):
        day = first + timedelta(days=n)
        active, views = rows.get(day, (None, None))
        figures.append(DayFigures(day=day, active_users=active, page_views=views))
    figures.append(DayFigures(day=today, active_users=stats.active_day, page_views=sessions.page_views(today)))
    return figures


def where_next(day: date, top_paths: list[tuple[str, int]]) -> list[WhereNext]:
    """Where people went after each of the day's top pages: its most frequent next pages (one round trip)."""
    paths = [path for path, _ in top_paths]
    found = recommendations.top_next(day, paths, NEXT_PATHS)
    return [WhereNext(path, views, following) for (path, views), following in zip(top_paths, found, strict=True)]


def overview() -> Overview:
    """Everything the dashboard shows, as of now."""
    stats = audience.stats()
    report, cache = reports.page("most-active", "day", 1, MOST_ACTIVE_ROWS)
    top_paths = sessions.top_paths(stats.day, TOP_PATHS)
    return Overview(
        generated_at=clock.now(),
        stats=stats,
        days=daily_figures(stats.day, stats, DAYS),
        top_paths=top_paths,
        where_next=where_next(stats.day, top_paths),
        most_active=report,
        most_active_cache=cache,
        flush=flush.status(),
        top_groups=groups.top_active_today(TOP_GROUPS),
        pages_now=pages_now.top(live.PAGES_NOW_SHOWN),
    )
