"""Queries over the flushed rows, for jobs that need history beyond Redis. The database lags Redis by
the flush lag, so each page is checked against the live last seen (a round trip a page)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass

from activity import clock
from activity.models import UserActivity
from activity.services import last_seen


@dataclass(frozen=True, slots=True)
class Dormant:
    user: str
    account_id: int | None
    last_seen: dt.datetime


def dormant_users(days: float, window: float = 1.0, page_size: int = 500) -> Iterator[list[Dormant]]:
    """Pages of users last active between ``days + window`` and ``days`` days ago, so a daily job
    with ``window=1`` meets each once. Keyset pages, which rows changing meanwhile cannot shift;
    users seen again since the last flush are left out."""
    now = clock.now()
    line = dt.datetime.fromtimestamp(now - days * 86400, dt.UTC)
    since = dt.datetime.fromtimestamp(now - (days + window) * 86400, dt.UTC)
    rows = UserActivity.objects.filter(last_seen__gte=since, last_seen__lt=line).order_by("last_seen", "user_id")
    after: tuple[dt.datetime, str] | None = None
    while True:
        page_rows = rows
        if after is not None:
            page_rows = rows.filter(last_seen__gte=after[0]).exclude(last_seen=after[0], user_id__lte=after[1])
        page = list(page_rows.values_list("user_id", "account_id", "last_seen")[:page_size])
        if not page:
            return
        after = (page[-1][2], page[-1][0])
        live = last_seen.get_many(user_id for user_id, _, _ in page)
        cutoff = line.timestamp()
        yield [
            Dormant(user=user_id, account_id=account_id, last_seen=last_seen)
            for user_id, account_id, last_seen in page
            if (live[user_id] or 0.0) < cutoff
        ]
