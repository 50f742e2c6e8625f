"""Sorted reports in Redis, each command's work bounded whatever the number of viewers.

The page-view scripts keep, per day and ISO week, the top viewers (user -> views, the
``ACTIVITY_REPORT_CANDIDATES`` users with the most: ``lua/viewer_rank.lua``) and the by-name entries
("name NUL user") of the period's new viewers in a pending set (``lua/viewer_names.lua``), which
merges move into a by-name index (score 0) a bounded slice at a time, so no report ever sorts every
viewer:

- a ranked report's copy is built by copying the top viewers' first K into a candidates set
  (ZRANGESTORE ... REV LIMIT) and one ``SORT candidates BY views DESC GET # GET name GET views
  STORE`` of those K, in one MULTI: O(log C + K log K) for C candidates (on a Redis Cluster, where
  SORT may not use BY and GET patterns, the same rows from the top viewers' first K and their names,
  written in one MULTI). Its rows and a meta key (build time) live ``keep_ms``; pages are read with
  ``LRANGE``;
- the by-name report is the index itself, read a page at a time by rank after merging one slice of
  pending entries in the same call (``lua/report_by_name.lua``), then each user's views from their
  counters (one MGET): O(slice x log N + page), nothing to rebuild, current unless more than a slice
  was pending.

Which report to build when, and who may build it, is decided above the store (``activity.services.reports``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from activity import conf
from activity.calendar import period_name
from activity.store import keys
from activity.store.client import Client, is_cluster
from activity.store.scripts import LuaScript

COLUMNS = ("user", "name", "views")  # the GET patterns of a ranked report, in this order
BY_NAME = LuaScript("report_by_name")
READ = LuaScript("report_read")


@dataclass(frozen=True, slots=True)
class Copy:
    generated_at: float
    pttl_ms: int  # milliseconds the copy still lives
    count: int  # rows in the whole copy
    rows: list[tuple[str, str | None, str | None]]  # (user, name, views) of the page read


def read(client: Client, report_id: str, first: int, size: int, marker: str, now: float, window_s: int) -> Copy | None:
    """Rows ``first``..``first + size - 1`` of the stored copy, or None when there is none.

    One script (``lua/report_read.lua``): PTTL and GET of the meta, LLEN and one LRANGE of the
    rows, and the ZADD of ``marker`` (``name:period``) that tells the refresh job the report is read.
    """
    width = len(COLUMNS)
    script_keys = [keys.report_meta(report_id), keys.report_rows(report_id), keys.reports_read()]
    page = [first * width, (first + size) * width - 1]
    pttl, generated, length, flat = READ(client, script_keys, [*page, marker, repr(now), window_s])
    if generated is None or pttl < 0:
        return None
    rows = [tuple(flat[index : index + width]) for index in range(0, len(flat), width)]
    return Copy(generated_at=float(generated), pttl_ms=pttl, count=length // width, rows=rows)


def build_ranked(client: Client, report_id: str, period_key: str, top: int, keep_ms: int, now: float) -> None:
    """The ``top`` users by views in the period, most first (ties: user id descending, as SORT
    breaks them), with names and views: one MULTI of ZRANGESTORE of the top viewers' first K, one
    SORT of those K ... STORE, the candidates' DEL, the rows' PEXPIRE and the meta. The top viewers
    are ordered as SORT orders (views, then user id byte by byte), so their first K are the rows a
    SORT over every viewer would give.

    A Redis 7.0 cluster refuses SORT's BY and GET patterns: there ``_build_ranked_on_cluster``
    writes the same rows in the same layout."""
    if is_cluster(client):
        _build_ranked_on_cluster(client, report_id, period_key, top, keep_ms, now)
        return
    candidates = keys.report_candidates(report_id)
    pipe = client.pipeline(transaction=True)
    pipe.zrangestore(candidates, keys.top_viewers(period_key), 0, top - 1, desc=True)
    pipe.sort(
        candidates,
        by=keys.user_views_pattern(period_key),
        get=["#", keys.display_name_pattern(), keys.user_views_pattern(period_key)],
        desc=True,
        start=0,
        num=top,
        store=keys.report_rows(report_id),
    )
    pipe.delete(candidates)
    pipe.pexpire(keys.report_rows(report_id), keep_ms)
    pipe.set(keys.report_meta(report_id), repr(now), px=keep_ms)
    pipe.execute()


def _build_ranked_on_cluster(
    client: Client, report_id: str, period_key: str, top: int, keep_ms: int, now: float
) -> None:
    """``build_ranked`` without SORT: the top viewers' first K with their views (ZRANGE ... REV:
    views descending, then user id byte by byte descending, SORT ... DESC's order), one MGET of their
    display names, then one MULTI writing the rows as SORT ... GET # GET name GET views STORE lays
    them out (user, name, views a row; a missing name is ''), their PEXPIRE and the meta. Three
    round trips behind the rebuild lock; the views are the top viewers' scores, which their
    counters' INCR replies set."""
    rows = keys.report_rows(report_id)
    ranked = client.zrange(keys.top_viewers(period_key), 0, top - 1, desc=True, withscores=True)
    names = client.mget([keys.display_name(user) for user, _ in ranked]) if ranked else []
    flat = [
        value
        for (user, views), name in zip(ranked, names, strict=True)
        for value in (user, name or "", str(int(views)))
    ]
    pipe = client.pipeline(transaction=True)
    pipe.delete(rows)
    if flat:
        pipe.rpush(rows, *flat)
    pipe.pexpire(rows, keep_ms)
    pipe.set(keys.report_meta(report_id), repr(now), px=keep_ms)
    pipe.execute()


@dataclass(frozen=True, slots=True)
class ByName:
    """What one by-name read did and read."""

    count: int  # users in the by-name index, after the merge
    merged: int  # pending entries this call moved into the index
    pending: int  # entries still pending after it (the index lacks them)
    rows: list[tuple[str, str, int]]  # (user, name, views) of the page read


def read_by_name(client: Client, period: str, day: date, first: int, size: int, merge_slice: int) -> ByName:
    """Merge up to ``merge_slice`` pending entries of the ``period`` (``day`` / ``week``) holding
    ``day`` into its by-name index, then read rows ``first``..``first + size - 1`` of the index
    (``size`` 0: merge only), each with the user's views (0 when the counter expired apart from the
    index). Two round trips for a page with rows: the script names the page's users, then one MGET
    reads their counters (a script that built those key names itself would touch undeclared keys);
    one when there are no rows. Each command's work is bounded by the slice and the page."""
    period_key = period_name(period, day)
    script_keys = [keys.viewers_by_name(period_key), keys.viewers_by_name_pending(period_key)]
    ttl = keys.page_stats_ttl(conf.settings.PAGE_STATS_DAYS, weekly=period == "week")
    count, merged, pending, *members = BY_NAME(client, script_keys, [first, size, merge_slice, ttl])
    entries = [member.partition(keys.NAME_SEPARATOR) for member in members]
    views = client.mget([keys.user_views(period_key, user) for _, _, user in entries]) if entries else []
    rows = [(user, name, int(viewed or 0)) for (name, _, user), viewed in zip(entries, views, strict=True)]
    return ByName(count=count, merged=merged, pending=pending, rows=rows)


def merge_by_name(client: Client, period: str, day: date, merge_slice: int) -> ByName:
    """One slice of the period's pending by-name entries into its index, reading no page."""
    return read_by_name(client, period, day, 0, 0, merge_slice)


def pttl_ms(client: Client, report_id: str) -> int:
    """Milliseconds the stored copy still lives; negative when there is none."""
    return client.pttl(keys.report_meta(report_id))


def read_since(client: Client, since: float) -> list[str]:
    """The markers read since ``since``; older ones are dropped in the same MULTI."""
    pipe = client.pipeline(transaction=True)
    pipe.zremrangebyscore(keys.reports_read(), "-inf", f"({since!r}")
    pipe.zrange(keys.reports_read(), 0, -1)
    _, members = pipe.execute()
    return members
