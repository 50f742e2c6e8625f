"""The service's clock. Everything asks ``clock.now()`` so tests can move time; Lua never reads it."""

import time
from datetime import UTC, datetime


def now() -> float:
    return time.time()


def now_datetime() -> datetime:
    """``now()`` as an aware UTC datetime: the default of model fields stamped by the service's clock."""
    return datetime.fromtimestamp(now(), UTC)
