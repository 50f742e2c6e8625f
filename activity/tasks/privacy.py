"""Erasing a user from Celery: where a deleted Django user's erase goes when Redis could not serve
at the time (``activity.privacy.erase_after_commit``); idempotent, retried until Redis is back."""

from __future__ import annotations

from celery import shared_task

from activity import privacy
from activity.events import clean_user
from activity.tasks import retries


@shared_task(name="activity.erase_user", **retries.while_redis_is_away(max_retries=None))
def erase_user(user: str) -> dict[str, int]:
    """Erase ``user`` everywhere (``InvalidValue`` for a malformed id: not retried)."""
    erased = privacy.erase(clean_user(user))
    return {"traces": erased.traces, "rows": erased.rows, "groups": erased.groups}
