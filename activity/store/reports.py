"""Cached sorted reports: one ``SORT ... STORE`` behind a rebuild lock, pages read with ``LRANGE``.

A report's rows are the flattened ``GET`` values of one SORT (user id, display name, views, per
row) stored in a list. Its meta key says when it was built and, through its TTL, whether it is
fresh: rows and meta live ``ttl + stale`` seconds and count as fresh while more than ``stale``
seconds remain, so a stale copy is still there for readers while one client rebuilds.

Only the lock holder runs SORT. Other readers serve the stale copy or, when there is none, block on
the report's announcement list (BLPOP) until the holder pushes to it after building; each waiter
woken passes the announcement on (RPUSH) so the next one wakes too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from activity.store import keys
from activity.store.locks import Lock
from activity.store.sessions import day_of, week_of

logger = logging.getLogger("activity.reports")

COLUMNS = ("user", "name", "views")  # the GET patterns of every report, in this order
PERIODS = ("day", "week")


@dataclass(frozen=True, slots=True)
class Report:
    """How one report is built: SORT the period's viewers BY ``by``, optionally ALPHA/DESC/top N."""

    name: str
    description: str
    by: Callable[[str], str]  # period key -> BY pattern
    alpha: bool = False
    desc: bool = False
    top: bool = False  # keep only the first ACTIVITY_REPORT_TOP rows (SORT ... LIMIT)


REGISTRY: dict[str, Report] = {
    report.name: report
    for report in (
        Report(
            "most-active",
            "Users ranked by page views in the period (UTC day, or ISO week with period=week), top N.",
            by=keys.user_views_pattern,
            desc=True,
            top=True,
        ),
        Report(
            "active-by-name",
            "Users with page views in the period, by username (A-Z; the user id when none is known).",
            by=lambda period: keys.display_name_pattern(),
            alpha=True,
        ),
    )
}


@dataclass(frozen=True, slots=True)
class Settings:
    ttl_ms: int  # fresh for this long after a build
    stale_ms: int  # kept this much longer, served as stale while one client rebuilds
    wait_s: float  # lock TTL, and how long a reader without a copy waits for the holder's build
    top: int  # rows kept by ``top`` reports
    step_s: float  # longest single BLPOP (below the client's socket timeout)
    read_window_s: int  # reports read this recently are kept fresh by the refresh job


@dataclass(frozen=True, slots=True)
class Snapshot:
    generated_at: float
    expires_in: float  # seconds it stays fresh (0 when stale)
    fresh: bool
    count: int
    rows: list[dict[str, object]]


def period_key(period: str, now: float) -> str:
    """The keys' name for the current ``day`` (UTC) or ``week`` (ISO, UTC) at ``now``."""
    return f"d:{day_of(now)}" if period == "day" else f"w:{week_of(now)}"


def report_id(report: Report, period: str, now: float) -> str:
    return f"{report.name}:{period_key(period, now)}"


def read(
    client: redis.Redis, report: Report, period: str, now: float, number: int, size: int, cfg: Settings
) -> Snapshot | None:
    """Page ``number`` of the stored copy, or None when there is none. One MULTI: PTTL and GET of
    the meta, LLEN and one LRANGE of the rows, and the ZADD that tells the refresh job it is read."""
    rid = report_id(report, period, now)
    width = len(COLUMNS)
    pipe = client.pipeline(transaction=True)
    pipe.pttl(keys.report_meta(rid))
    pipe.get(keys.report_meta(rid))
    pipe.llen(keys.report_rows(rid))
    pipe.lrange(keys.report_rows(rid), (number - 1) * size * width, number * size * width - 1)
    pipe.zadd(keys.reports_read(), {f"{report.name}:{period}": now})
    pipe.expire(keys.reports_read(), cfg.read_window_s)
    pttl, generated, length, flat, _, _ = pipe.execute()
    if generated is None or pttl < 0:
        return None
    rows = []
    for index in range(0, len(flat), width):
        user, name, views = flat[index : index + width]
        rank = (number - 1) * size + index // width + 1
        rows.append({"rank": rank, "user": user, "name": name or user, "views": int(views or 0)})
    return Snapshot(
        generated_at=float(generated),
        expires_in=max(0, pttl - cfg.stale_ms) / 1000,
        fresh=pttl > cfg.stale_ms,
        count=length // width,
        rows=rows,
    )


def build(client: redis.Redis, report: Report, period: str, now: float, cfg: Settings) -> None:
    """Exactly one SORT ... STORE, then EXPIRE, the meta and the announcement, in one MULTI."""
    pkey = period_key(period, now)
    rid = f"{report.name}:{pkey}"
    keep_ms = cfg.ttl_ms + cfg.stale_ms
    pipe = client.pipeline(transaction=True)
    pipe.sort(
        keys.viewers(pkey),
        by=report.by(pkey),
        get=["#", keys.display_name_pattern(), keys.user_views_pattern(pkey)],
        desc=report.desc,
        alpha=report.alpha,
        start=0 if report.top else None,
        num=cfg.top if report.top else None,
        store=keys.report_rows(rid),
    )
    pipe.pexpire(keys.report_rows(rid), keep_ms)
    pipe.set(keys.report_meta(rid), repr(now), px=keep_ms)
    pipe.delete(keys.report_built(rid))
    pipe.rpush(keys.report_built(rid), repr(now))
    pipe.pexpire(keys.report_built(rid), int(cfg.wait_s * 1000))
    pipe.execute()


def fresh_for_ms(client: redis.Redis, report: Report, period: str, now: float, cfg: Settings) -> int:
    """Milliseconds the stored copy stays fresh; negative when stale or missing."""
    pttl = client.pttl(keys.report_meta(report_id(report, period, now)))
    return pttl - cfg.stale_ms if pttl >= 0 else -1


def build_unless_fresh(
    client: redis.Redis, report: Report, period: str, now: float, cfg: Settings, margin_ms: int = 0
) -> str:
    """Rebuild behind the lock unless a copy fresh for more than ``margin_ms`` is there (checked
    again after taking the lock, so a reader that raced a finished build does not SORT again).
    Returns ``built``, ``fresh`` or ``busy`` (another client holds the lock)."""
    lock = Lock(client, keys.lock(f"report:{report_id(report, period, now)}"), int(cfg.wait_s * 1000))
    if not lock.acquire():
        return "busy"
    try:
        if fresh_for_ms(client, report, period, now, cfg) > margin_ms:
            return "fresh"
        build(client, report, period, now, cfg)
        return "built"
    finally:
        if not lock.release():
            logger.warning("report lock %s expired during the build; raise ACTIVITY_REPORT_WAIT", lock.key)


def wait_for_build(client: redis.Redis, report: Report, period: str, now: float, cfg: Settings, seconds: float) -> None:
    """Block until the holder announces a build or ``seconds`` pass; pass the announcement on."""
    built = keys.report_built(report_id(report, period, now))
    try:
        popped = client.blpop([built], timeout=max(0.01, min(seconds, cfg.step_s)))
    except redis.TimeoutError:
        # The reply came later than the socket timeout (a loaded server): redis-py has dropped
        # that connection, so nothing is lost; it counts as a step with no announcement.
        return
    if popped is not None:
        relay = client.pipeline(transaction=True)
        relay.rpush(built, popped[1])
        relay.pexpire(built, int(cfg.wait_s * 1000))
        relay.execute()


def get_page(
    client: redis.Redis, report: Report, period: str, now: float, number: int, size: int, cfg: Settings
) -> tuple[Snapshot, str]:
    """A page and how it was served: ``hit`` (fresh copy), ``stale`` (old copy while another client
    rebuilds) or ``miss`` (built now, by this reader or by the holder it waited for)."""
    found = read(client, report, period, now, number, size, cfg)
    if found is not None and found.fresh:
        return found, "hit"
    deadline = time.monotonic() + 2 * cfg.wait_s  # past the lock TTL, so a dead holder is replaced
    while True:
        outcome = build_unless_fresh(client, report, period, now, cfg)
        if outcome != "busy":
            return read(client, report, period, now, number, size, cfg), "miss" if outcome == "built" else "hit"
        if found is not None:
            return found, "stale"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            logger.warning("report %s: no build announced in time; building without the lock", report.name)
            build(client, report, period, now, cfg)
            return read(client, report, period, now, number, size, cfg), "miss"
        wait_for_build(client, report, period, now, cfg, remaining)
        found = read(client, report, period, now, number, size, cfg)
        if found is not None:
            return found, "miss"


def read_recently(client: redis.Redis, since: float) -> list[tuple[Report, str]]:
    """Reports (and periods) read since ``since``; older entries are dropped in the same MULTI."""
    pipe = client.pipeline(transaction=True)
    pipe.zremrangebyscore(keys.reports_read(), "-inf", f"({since!r}")
    pipe.zrange(keys.reports_read(), 0, -1)
    _, members = pipe.execute()
    found = []
    for member in members:
        name, _, period = member.rpartition(":")
        if name in REGISTRY and period in PERIODS:
            found.append((REGISTRY[name], period))
    return found
