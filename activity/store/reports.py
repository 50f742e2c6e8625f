"""Cached sorted reports in Redis: one ``SORT ... STORE`` per build, pages read with ``LRANGE``.

A copy is the flattened ``GET`` values of one SORT (user id, display name, views, per row) stored
in a list, plus a meta key holding when it was built; both live ``keep_ms``. Which report to build
when, and who may build it, is decided above the store (``activity.reports``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from activity.store import keys
from activity.store.client import Client

COLUMNS = ("user", "name", "views")  # the GET patterns of every report, in this order

# The BY pattern of each ordering, for a period's key name.
ORDERS: dict[str, Callable[[str], str]] = {
    "views": keys.user_views_pattern,
    "name": lambda period_key: keys.display_name_pattern(),
}


@dataclass(frozen=True, slots=True)
class Copy:
    generated_at: float
    pttl_ms: int  # milliseconds the copy still lives
    count: int  # rows in the whole copy
    rows: list[tuple[str, str | None, str | None]]  # (user, name, views) of the page read


def read(client: Client, report_id: str, first: int, size: int, marker: str, now: float, window_s: int) -> Copy | None:
    """Rows ``first``..``first + size - 1`` of the stored copy, or None when there is none.

    One MULTI: PTTL and GET of the meta, LLEN and one LRANGE of the rows, and the ZADD of
    ``marker`` (``name:period``) that tells the refresh job the report is read.
    """
    width = len(COLUMNS)
    pipe = client.pipeline(transaction=True)
    pipe.pttl(keys.report_meta(report_id))
    pipe.get(keys.report_meta(report_id))
    pipe.llen(keys.report_rows(report_id))
    pipe.lrange(keys.report_rows(report_id), first * width, (first + size) * width - 1)
    pipe.zadd(keys.reports_read(), {marker: now})
    pipe.expire(keys.reports_read(), window_s)
    pttl, generated, length, flat, _, _ = pipe.execute()
    if generated is None or pttl < 0:
        return None
    rows = [tuple(flat[index : index + width]) for index in range(0, len(flat), width)]
    return Copy(generated_at=float(generated), pttl_ms=pttl, count=length // width, rows=rows)


def build(
    client: Client,
    report_id: str,
    period_key: str,
    order: str,
    *,
    desc: bool,
    alpha: bool,
    limit: int | None,
    keep_ms: int,
    now: float,
) -> None:
    """Exactly one SORT of the period's viewers ... STORE, then EXPIRE and the meta, in one MULTI."""
    pipe = client.pipeline(transaction=True)
    pipe.sort(
        keys.viewers(period_key),
        by=ORDERS[order](period_key),
        get=["#", keys.display_name_pattern(), keys.user_views_pattern(period_key)],
        desc=desc,
        alpha=alpha,
        start=0 if limit is not None else None,
        num=limit,
        store=keys.report_rows(report_id),
    )
    pipe.pexpire(keys.report_rows(report_id), keep_ms)
    pipe.set(keys.report_meta(report_id), repr(now), px=keep_ms)
    pipe.execute()


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
