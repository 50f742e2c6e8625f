"""Recording events from Celery: the ingest API's validator, idempotent, safe to retry."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from activity import services
from activity.events import clean_events
from activity.tasks import retries


@shared_task(name="activity.record_events", **retries.while_redis_is_away(max_retries=10, backoff_max=60))
def record_events(events: list[dict[str, Any]]) -> dict[str, int]:
    """Record a batch of events (dicts as in ``POST /api/v1/events/``).

    A bad batch raises ``InvalidBatch`` (the API's error shape as JSON) and is not retried: it
    stays bad however often it runs. Replaying a good one is harmless: last seen only ever moves
    forward. Give each event a ``ts`` when sending, so a retry records the time of the event
    rather than the time of the retry.
    """
    result = services.record_events(clean_events(events))
    return {"accepted": result.accepted, "last_seen_updated": result.last_seen_updated}
