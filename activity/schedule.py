"""The Celery beat schedule, installed by ``app.on_after_configure.connect(install_beat_schedule)``.
Tasks are named by string, as Celery builds the schedule before Django is set up; every entry
expires after its interval, so a worker that was down does not come back to a pile of stale runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery
from celery.schedules import crontab

from activity import conf

# Seconds between runs of the jobs whose interval is not a setting.
PRUNE_INTERVAL = 3600
SWEEP_INTERVAL = 3600
REPORT_REFRESH_INTERVAL = 15  # a read report with under two intervals of freshness left is rebuilt


def every(task: str, seconds: float, **options: Any) -> dict[str, Any]:
    """A beat entry running ``task`` every ``seconds``, expiring after one interval."""
    return {"task": task, "schedule": float(seconds), "options": {"expires": float(seconds), **options}}


def maintenance() -> dict[str, dict[str, Any]]:
    return {
        "activity-flush": every("activity.flush", conf.settings.FLUSH_INTERVAL),
        "activity-prune": every("activity.prune", PRUNE_INTERVAL),
        "activity-sweep": every("activity.sweep", SWEEP_INTERVAL),
    }


def rollup() -> dict[str, dict[str, Any]]:
    # Every hour at :05 (Celery's zone): whatever the calendar's zone and its offset (+5:45, a DST
    # change), yesterday's rollup runs within an hour of its local midnight, late events in; the
    # later passes harvest stragglers (reruns only add), each a few bounded commands.
    return {
        "activity-rollup-previous-day": {
            "task": "activity.rollup_day",
            "schedule": crontab(minute=5),
            "options": {"expires": 3600},
        }
    }


def reports() -> dict[str, dict[str, Any]]:
    return {"refresh-reports": every("activity.refresh_reports", REPORT_REFRESH_INTERVAL)}


PARTS: list[Callable[[], dict[str, dict[str, Any]]]] = [maintenance, rollup, reports]


def beat_schedule() -> dict[str, dict[str, Any]]:
    """Every part's entries merged; a name defined twice is a mistake, so it raises."""
    schedule: dict[str, dict[str, Any]] = {}
    for part in PARTS:
        entries = part()
        clash = schedule.keys() & entries.keys()
        if clash:
            raise ValueError(f"beat entries defined twice: {sorted(clash)}")
        schedule.update(entries)
    return schedule


def install_beat_schedule(sender: Celery, **kwargs: Any) -> None:
    """``on_after_configure`` receiver: add the app's entries, built once the settings are read; an
    entry of the same name in the site's own ``CELERY_BEAT_SCHEDULE`` wins."""
    sender.conf.beat_schedule = {**beat_schedule(), **(sender.conf.beat_schedule or {})}
