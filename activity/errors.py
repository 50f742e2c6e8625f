"""The service's own exceptions. Code above the store never sees redis-py's: the store turns "Redis
cannot serve now" into ``StoreUnavailable``, which each entry point maps to its answer (503, fail
open, retry later)."""

from __future__ import annotations

import json


class ActivityError(Exception):
    """Base of the service's exceptions."""


class StoreUnavailable(ActivityError):
    """Redis cannot serve now (unreachable, timing out, or refusing work: OOM, READONLY, ...): worth
    retrying later. ``reason`` is the reply code, ``connection`` or ``timeout``. Rebuilt from its
    ``args``, so it survives pickling (Celery) with its class."""

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
    """A batch breaks the ingest rules; nothing of it was recorded. ``errors`` has DRF's nested
    field-error shape and ``str(error)`` is it as JSON, so a failed task carries what the API answers."""

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


class KeyReused(ActivityError):
    """An idempotency key came back with another request than the one it was first used for."""


class KeyInUse(ActivityError):
    """Another attempt holds this idempotency key now; ``retry_after`` is the seconds until it may be
    taken over. Rebuilt from its ``args``, so it survives pickling (Celery)."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(retry_after)
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"This Idempotency-Key's first request is still running; retry after {self.retry_after} s."
