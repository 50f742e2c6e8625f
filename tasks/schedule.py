"""The Celery beat schedule, built from settings. ``project/celery.py`` installs it.

Each part of the service contributes a function returning its entries; ``beat_schedule`` merges
them, so adding a job is one function plus one line in ``PARTS``. Every entry expires after its
interval: a worker that was down does not come back to a pile of stale runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activity import conf


def every(task: str, seconds: float, **options: Any) -> dict[str, Any]:
    """A beat entry running ``task`` every ``seconds``, expiring after one interval."""
    return {"task": task, "schedule": float(seconds), "options": {"expires": float(seconds), **options}}


def maintenance() -> dict[str, dict[str, Any]]:
    return {
        "activity-flush": every("activity.flush", conf.settings.FLUSH_INTERVAL),
        "activity-prune": every("activity.prune", conf.settings.PRUNE_INTERVAL),
        "activity-sweep": every("activity.sweep", conf.settings.SWEEP_INTERVAL),
    }


def rollup() -> dict[str, dict[str, Any]]:
    from tasks.rollup import ROLLUP_BEAT

    return ROLLUP_BEAT


PARTS: list[Callable[[], dict[str, dict[str, Any]]]] = [maintenance, rollup]

# Modules holding scheduled tasks, for ``app.conf.imports``.
TASK_MODULES = ["tasks.maintenance", "tasks.reengagement", "tasks.rollup"]


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
