"""Recording events from Celery: same validation as the ingest API, idempotent, safe to retry."""

from __future__ import annotations

import json
from typing import Any

from celery import shared_task

from activity import clock, services
from activity.api.serializers import EventBatchSerializer
from activity.store.client import UNAVAILABLE


class InvalidBatch(ValueError):
    """The batch breaks the ingest rules; the message holds the API's field-error shape as JSON.

    Raised instead of retrying: a bad batch stays bad however often it runs.
    """


@shared_task(
    name="activity.record_events",
    autoretry_for=UNAVAILABLE,
    retry_backoff=True,
    retry_backoff_max=60,
    max_retries=10,
    acks_late=True,
)
def record_events(events: list[dict[str, Any]]) -> dict[str, int]:
    """Record a batch of events (dicts as in ``POST /api/v1/events/``).

    Replaying it is harmless: last seen only ever moves forward. Give each event a ``ts`` when
    sending, so a retry records the time of the event rather than the time of the retry.
    """
    batch = EventBatchSerializer(data={"events": events})
    if not batch.is_valid():
        raise InvalidBatch(json.dumps(batch.errors))
    result = services.record_events(batch.to_events(now=clock.now()))
    return {"accepted": result.accepted, "last_seen_updated": result.last_seen_updated}
