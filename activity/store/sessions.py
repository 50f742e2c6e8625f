"""Navigation sessions and page-view statistics: one EVALSHA per batch, lists read by LRANGE."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from activity import conf
from activity.calendar import day_name, day_of, period_name
from activity.store import keys
from activity.store.client import Client
from activity.store.scripts import LuaScript, Pipeline

SESSION_RECORD = LuaScript("session_record")
PAGE = LuaScript("session_page")
ENTRY_JSON = json.JSONEncoder(separators=(",", ":"))  # json.dumps would build one per view


@dataclass(frozen=True, slots=True)
class PageView:
    user: str
    path: str
    ts: float
    name: str | None = None  # the username, when the caller knows it (the middleware does)


@dataclass(frozen=True, slots=True)
class SessionPage:
    count: int  # pages in the whole session
    expires_in: float  # seconds until the session ends unless the user views another page
    views: list[tuple[str, float]]  # (path, ts), most recent first


def paths_slack(max_paths: int) -> int:
    """New members a capped set (a day's paths, a page's next pages) takes past ``max_paths`` before
    the script trims it: a tenth of the cap, so each trim's ZREMRANGEBYRANK is paid for by that
    many cheap views."""
    return max(max_paths // 10, 1)


def queue_record(
    pipe: Pipeline, views: Sequence[PageView], window_s: int, max_pages: int, stats_days: int, now: float
) -> int:
    """Queue one EVALSHA recording every view of the batch; returns its reply index (sessions started).
    The views of a user erased and still tombstoned at ``now`` are skipped.

    Each day's path set keeps the ``ACTIVITY_PAGE_STATS_MAX_PATHS`` most viewed (plus at most
    ``paths_slack`` of it), so a catch-all route or kept query strings cannot grow it without bound.
    With ``ACTIVITY_TRANSITIONS`` a view following another in its session also counts that step,
    each page keeping its ``ACTIVITY_TRANSITIONS_MAX_NEXT`` most frequent next pages. Each day and
    week keeps its ``ACTIVITY_REPORT_CANDIDATES`` users with the most views for the ranked reports,
    and a user's by-name entry waits in the period's pending set until a merge
    (``activity.store.reports``) moves it into the by-name index.
    """
    return pipe.script(SESSION_RECORD, *record_call(views, window_s, max_pages, stats_days, now))


def record_call(
    views: Sequence[PageView], window_s: int, max_pages: int, stats_days: int, now: float
) -> tuple[list[str], list[str | int]]:
    """(KEYS, ARGV) of the page-view script for ``views``, as ``queue_record`` sends them."""
    settings = conf.settings
    max_paths, max_next = settings.PAGE_STATS_MAX_PATHS, settings.TRANSITIONS_MAX_NEXT
    script_keys: list[str] = [keys.tombstones("pv")]
    args: list[str | int] = [
        int(window_s * 1000),
        int(max_pages),
        keys.page_stats_ttl(stats_days),
        keys.page_stats_ttl(stats_days, weekly=True),
        max_paths,
        paths_slack(max_paths),
        int(settings.TRANSITIONS),
        max_next,
        paths_slack(max_next),
        settings.REPORT_CANDIDATES,
        repr(now),
    ]
    days: dict[date, tuple[str, str, list[str], list[str]]] = {}  # a batch's views share a day or two
    for view in views:
        when = day_of(view.ts)
        if when not in days:
            days[when] = _day_keys(when)
        day, week, counts, pending = days[when]
        script_keys += [
            keys.session(view.user),
            keys.user_views(day, view.user),
            keys.user_views(week, view.user),
            keys.display_name(view.user),
            *counts,
            keys.display_aliases(view.user),
            *pending,
        ]
        entry = ENTRY_JSON.encode({"path": view.path, "ts": view.ts})
        args += [view.user, entry, view.path, view.name or ""]
    return script_keys, args


def _day_keys(when: date) -> tuple[str, str, list[str], list[str]]:
    """The day's and week's names, and the keys every view of that day shares (KEYS 5-12, 14-15)."""
    day, week, name = period_name("day", when), period_name("week", when), day_name(when)
    counts = [
        keys.sessions_started(name),
        keys.page_views(name),
        keys.path_views(name),
        keys.top_viewers(day),
        keys.top_viewers(week),
        keys.viewers_by_name(day),
        keys.viewers_by_name(week),
        keys.transitions(name, ""),
    ]
    return day, week, counts, [keys.viewers_by_name_pending(day), keys.viewers_by_name_pending(week)]


def page(client: Client, user: str, number: int, size: int) -> SessionPage | None:
    """Page ``number`` (1-based) of the session, most recent first: one script reading LLEN, PTTL
    and one LRANGE of just that page, so the count, the TTL and the rows describe the same list."""
    # Newest entries are on the right: page 1 is the last ``size`` entries, reversed. A start
    # before the head is clamped by Redis, so the last page holds just what remains.
    count, pttl, rows = PAGE(client, [keys.session(user)], [-number * size, -(number - 1) * size - 1])
    if count == 0:
        return None
    views = [(item["path"], item["ts"]) for item in map(json.loads, reversed(rows))]
    return SessionPage(count=count, expires_in=max(pttl, 0) / 1000, views=views)


def day_counts(client: Client, day: date) -> tuple[int, int]:
    """(sessions started, page views) on ``day``; one round trip."""
    started, views = client.mget(keys.sessions_started(day_name(day)), keys.page_views(day_name(day)))
    return int(started or 0), int(views or 0)


def top_paths(client: Client, day: date, n: int) -> list[tuple[str, int]]:
    """The ``n`` most viewed paths on ``day``, most viewed first (ties: path descending)."""
    rows = client.zrange(keys.path_views(day_name(day)), 0, n - 1, desc=True, withscores=True)
    return [(path, int(score)) for path, score in rows]
