"""Sorted reports, no command's work growing with the viewers (docs/sessions-reports.md): a ranked
copy sorts only the first K of the period's top viewers; the by-name report reads its index a page
at a time after merging one bounded slice of pending entries. ``services.reports`` decides when."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from activity import conf
from activity.calendar import period_name
from activity.store import keys, lifetimes
from activity.store.client import Client, is_cluster
from activity.store.scripts import LuaScript

COLUMNS = ("user", "name", "views")  # the GET patterns of a ranked report, in this order
REPORT_BY_NAME = LuaScript("report_by_name")


@dataclass(frozen=True, slots=True)
class ReportCopy:
    generated_at: float
    pttl_ms: int  # milliseconds the copy still lives
    count: int  # rows in the whole copy
    rows: list[tuple[str, str | None, str | None]]  # (user, name, views) of the page read


def read(
    client: Client, report_id: str, first: int, size: int, marker: str, now: float, window_s: int
) -> ReportCopy | None:
    """Rows ``first``..``first + size - 1`` of the stored copy, or None when there is none. One MULTI
    (every key is ``{pv}``), so its life, length and rows agree; it also tells the refresh job the
    report is read."""
    width = len(COLUMNS)
    meta, rows = keys.report_meta(report_id), keys.report_rows(report_id)
    pipe = client.pipeline(transaction=True)
    pipe.zadd(keys.reports_read(), {marker: now})
    pipe.expire(keys.reports_read(), window_s)
    pipe.pttl(meta)
    pipe.get(meta)
    pipe.llen(rows)
    pipe.lrange(rows, first * width, (first + size) * width - 1)
    *_, pttl, generated, length, flat = pipe.execute()
    if generated is None or pttl < 0:
        return None
    page = [tuple(flat[index : index + width]) for index in range(0, len(flat), width)]
    return ReportCopy(generated_at=float(generated), pttl_ms=pttl, count=length // width, rows=page)


def build_ranked(client: Client, report_id: str, period_key: str, top: int, keep_ms: int, now: float) -> None:
    """Store the ``top`` users by views in the period with names and views: one MULTI copying the
    top viewers' first ``top`` and SORTing only those. The top viewers keep SORT's order (views, then
    user id byte by byte), so these are the rows a SORT over every viewer gives. A cluster refuses
    SORT's BY and GET patterns: there ``_build_ranked_on_cluster`` writes the same rows."""
    if is_cluster(client):
        _build_ranked_on_cluster(client, report_id, period_key, top, keep_ms, now)
        return
    candidates = keys.report_candidates(report_id)
    pipe = client.pipeline(transaction=True)
    pipe.zrangestore(candidates, keys.top_viewers(period_key), 0, top - 1, desc=True)
    pipe.sort(
        candidates,
        by=keys.viewer_pattern(period_key),
        get=["#", keys.viewer_pattern(keys.VIEWER_NAME), keys.viewer_pattern(period_key)],
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
    """``build_ranked`` without SORT: the top viewers' first K (ZRANGE REV is SORT ... DESC's
    order), their names (one HGET each, pipelined), one MULTI writing the rows in SORT ... STORE's
    layout. Three round trips, behind the rebuild lock."""
    rows = keys.report_rows(report_id)
    ranked = client.zrange(keys.top_viewers(period_key), 0, top - 1, desc=True, withscores=True)
    names = _viewer_fields(client, [user for user, _ in ranked], keys.VIEWER_NAME)
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
    """Merge up to ``merge_slice`` pending entries of ``period`` into its by-name index, then read
    rows ``first``..``first + size - 1`` (``size`` 0: merge only) with each user's views. Two round
    trips for rows: a script naming the counters from the page it reads would touch undeclared keys."""
    period_key = period_name(period, day)
    script_keys = [keys.viewers_by_name(period_key), keys.viewers_by_name_pending(period_key)]
    ttl = lifetimes.page_stats_ttl(conf.settings.PAGE_STATS_DAYS, weekly=period == "week")
    count, merged, pending, *members = REPORT_BY_NAME(client, script_keys, [first, size, merge_slice, ttl])
    entries = [member.partition(keys.NAME_SEPARATOR) for member in members]
    views = _viewer_fields(client, [user for _, _, user in entries], period_key)
    rows = [(user, name, int(viewed or 0)) for (name, _, user), viewed in zip(entries, views, strict=True)]
    return ByName(count=count, merged=merged, pending=pending, rows=rows)


def merge_by_name(client: Client, period: str, day: date, merge_slice: int) -> ByName:
    """One slice of the period's pending by-name entries into its index, reading no page."""
    return read_by_name(client, period, day, 0, 0, merge_slice)


def _viewer_fields(client: Client, users: list[str], field: str) -> list[str | None]:
    """``field`` of each user's viewer hash: one round trip (the hashes share the ``{pv}`` slot)."""
    if not users:
        return []
    pipe = client.pipeline(transaction=False)
    for user in users:
        pipe.hget(keys.viewer(user), field)
    return pipe.execute()


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
