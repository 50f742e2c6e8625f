"""The service's own exceptions, in one place.

Code above the store never sees redis-py's errors: the store's client turns every reply that means
"Redis cannot serve now" into ``StoreUnavailable`` (see ``activity.store.client``), and the entry
points map that one class to their own answer (503, fail open, retry later).
"""

from __future__ import annotations

import json


class ActivityError(Exception):
    """Base of the service's exceptions."""


class StoreUnavailable(ActivityError):
    """Redis cannot serve now: unreachable, timing out, or answering a server state such as OOM,
    READONLY, LOADING, BUSY, MASTERDOWN, CLUSTERDOWN, TRYAGAIN or NOREPLICAS. Worth retrying later.

    ``reason`` is the reply code (``OOM``, ``READONLY``, ...) or ``connection`` / ``timeout``.
    Rebuilt from its ``args`` (pickle, Celery's result backends), so a retried task keeps its class.
    """

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(reason, message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return self.message if self.message.startswith(self.reason) else f"{self.reason}: {self.message}"


class StoreTimeout(StoreUnavailable):
    """The reply did not come within ``ACTIVITY_REDIS_TIMEOUT`` (the connection was dropped)."""


class InvalidValue(ActivityError, ValueError):
    """A value an event or a query may not carry; ``str(error)`` is the reason."""


class InvalidBatch(ActivityError, ValueError):
    """A batch of events breaks the ingest rules; nothing of it was recorded.

    ``errors`` has DRF's nested field-error shape (``{"events": {"3": {"ts": ["reason"]}}}``), and
    ``str(error)`` is that as JSON, so a Celery task's failure carries what the API would answer.
    """

    def __init__(self, errors: dict[str, object]) -> None:
        super().__init__(errors)
        self.errors = errors

    def __str__(self) -> str:
        return json.dumps(self.errors)


class DayOutOfRange(ActivityError, ValueError):
    """The day is in the future or its Redis figures have already expired."""


class UnknownReport(ActivityError, KeyError):
    """No report has this name."""


class UnknownPath(ActivityError, ValueError):
    """No page followed this one in the recommendation window (or it is never recorded)."""
