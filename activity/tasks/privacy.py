"""Erasing a user from Celery: where a deleted Django user's erase goes when Redis could not serve
at the time (``activity.privacy.erase_after_commit``); idempotent, retried until Redis is back."""

from __future__ import annotations

from celery import shared_task

from activity import privacy
from activity.errors import StoreUnavailable
from activity.events import clean_user


@shared_task(
    name="activity.erase_user",
    autoretry_for=(StoreUnavailable,),
    retry_backoff=True,
    retry_backoff_max=300,
    max_retries=None,
    acks_late=True,
)
def erase_user(user: str) -> dict[str, int]:
    """Erase ``user`` everywhere (``InvalidValue`` for a malformed id: not retried)."""
    erased = privacy.erase(clean_user(user))
    return {"traces": erased.traces, "rows": erased.rows, "groups": erased.groups}
