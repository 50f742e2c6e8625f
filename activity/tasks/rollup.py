"""The per-day rollup job: writes the day that ended into ``DailyRollup``. Idempotent, safe to retry."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from celery import shared_task

from activity import audience, calendar
from activity.tasks import retries


@shared_task(name="activity.rollup_day", **retries.while_redis_is_away(max_retries=10))
def rollup_day(day: str | None = None) -> dict[str, Any]:
    """Roll up ``day`` (ISO date; default: yesterday, UTC) into its ``DailyRollup`` row."""
    target = date.fromisoformat(day) if day else calendar.today() - timedelta(days=1)
    row = audience.rollup_day(target)
    if row is None:
        return {"day": target.isoformat(), "skipped": "another run holds the lock"}
    return {"day": target.isoformat(), **{figure: getattr(row, figure) for figure in audience.ROLLUP_FIGURES}}
