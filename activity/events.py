"""The event value type and the rules every entry point (API, tasks, middleware) validates with.

Each ``clean_*`` function returns the cleaned value or raises ``InvalidValue`` with a reason a
client can act on; the DRF serializers turn that into the field-error shape of API.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from activity import clock, conf

USER_ID_RE = re.compile(r"[A-Za-z0-9_.:@-]{1,64}")
MAX_PATH_LENGTH = 2048


class InvalidValue(ValueError):
    """A value an event may not carry; ``str(error)`` is the reason."""


@dataclass(frozen=True, slots=True)
class Event:
    user: str
    ts: float
    path: str | None = None


def clean_user(value: object) -> str:
    """A user id: 1-64 characters from [A-Za-z0-9_.:@-], given as a string or an integer."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidValue("Must be a string or an integer.")
    text = str(value)
    if not USER_ID_RE.fullmatch(text):
        raise InvalidValue("Must be 1-64 characters from A-Z, a-z, 0-9 and _ . : @ -.")
    return text


def clean_ts(value: object, now: float | None = None) -> float:
    """Epoch seconds (a number or an ISO 8601 string): finite, >= 0, not too far in the future."""
    if isinstance(value, bool):
        raise InvalidValue("Must be a number of epoch seconds or an ISO 8601 string, not a boolean.")
    if isinstance(value, (int, float)):
        ts = float(value)
        if not math.isfinite(ts):
            raise InvalidValue("Must be a finite number.")
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidValue("Not a number or an ISO 8601 date-time.") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        ts = moment.timestamp()
    else:
        raise InvalidValue("Must be a number of epoch seconds or an ISO 8601 string.")
    if ts < 0:
        raise InvalidValue("Must not be negative.")
    skew = conf.settings.MAX_FUTURE_SKEW
    if ts > (clock.now() if now is None else now) + skew:
        raise InvalidValue(f"Must not be more than {skew} seconds in the future.")
    return round(ts, 3)


def clean_path(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidValue("Must be a string.")
    if len(value) > MAX_PATH_LENGTH:
        raise InvalidValue(f"Must be at most {MAX_PATH_LENGTH} characters.")
    return value


def iso(ts: float) -> str:
    """Epoch seconds as an ISO 8601 UTC string with milliseconds, as the API shows times."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
