"""How the app's tasks outlast Redis being away: one set of Celery options, so every task retries
the same way and a change reaches them all.

A task whose work raised ``StoreUnavailable`` (Redis restarting, failing over, refusing writes) is
retried with exponential backoff; any other error is the task's own and is not. Tasks are
acknowledged only once they ran (``acks_late``), so a worker killed mid-task leaves the message to
another worker: every task using these options must be idempotent, and each says why it is.
"""

from __future__ import annotations

from typing import Any

from activity.errors import StoreUnavailable


def while_redis_is_away(max_retries: int | None, backoff_max: int = 300) -> dict[str, Any]:
    """``shared_task`` options: retried ``max_retries`` times (None: until Redis is back), waiting
    at most ``backoff_max`` seconds between two tries."""
    return {
        "autoretry_for": (StoreUnavailable,),
        "retry_backoff": True,
        "retry_backoff_max": backoff_max,
        "max_retries": max_retries,
        "acks_late": True,
    }
