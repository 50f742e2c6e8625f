"""Keeping read reports fresh: a beat job rebuilds them shortly before they expire."""

from __future__ import annotations

from celery import shared_task

from activity import conf, services


@shared_task(name="activity.refresh_reports", soft_time_limit=conf.settings.REPORT_REFRESH_INTERVAL)
def refresh_reports() -> int:
    """Rebuild the reports people read lately before their copies expire; returns how many.

    Not retried: a failed run is redone by the next one, one interval later.
    """
    return services.refresh_reports()


# Wired into the beat schedule by tasks.schedule. ``expires`` = the interval: a run that waited a
# whole interval in the queue is dropped, the next one does the same work.
