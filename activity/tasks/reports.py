"""Keeping read reports fresh: a beat job merges new viewers into the by-name indexes and rebuilds
read reports shortly before they expire; the admin's "recompute now" queues a rebuild of one report."""

from __future__ import annotations

from celery import shared_task

from activity import conf, reports


@shared_task(name="activity.refresh_reports", soft_time_limit=conf.settings.REPORT_REFRESH_INTERVAL)
def refresh_reports() -> int:
    """Merge the current day's and week's pending by-name entries (at most
    ACTIVITY_REPORT_MERGE_SLICES_PER_RUN slices a period), then rebuild the reports people read
    lately before their copies expire; returns how many were rebuilt.

    Not retried: a failed run is redone by the next one, one interval later.
    """
    return reports.refresh()


@shared_task(name="activity.rebuild_report", soft_time_limit=conf.settings.REPORT_WAIT)
def rebuild_report(name: str, period: str = "day") -> dict[str, str]:
    """Rebuild one report now; a report nobody reads again simply expires, as any other copy."""
    return {"report": name, "period": period, "outcome": reports.rebuild(name, period)}


# Wired into the beat schedule by activity.tasks.schedule. ``expires`` = the interval: a run that waited a
# whole interval in the queue is dropped, the next one does the same work.
