"""The event value type and the rules every entry point (API, tasks, middleware) validates with.

Each ``clean_*`` function returns the cleaned value or raises ``InvalidValue`` with a reason a
client can act on. ``clean_events`` validates a whole batch for the ingest API and the Celery task
alike, and reports every bad field at once in DRF's nested error shape (API.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from activity import clock, conf
from activity.errors import InvalidBatch, InvalidValue

USER_ID_RE = re.compile(r"[A-Za-z0-9_.:@-]{1,64}")
MAX_PATH_LENGTH = 2048
REQUIRED = "This field is required."
NOT_NULL = "This field may not be null."


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


def _clean_event(raw: object, now: float) -> Event | dict[str, list[str]]:
    """The event, or its errors by field."""
    if not isinstance(raw, dict):
        return {"non_field_errors": [f"Invalid data. Expected a dictionary, but got {type(raw).__name__}."]}
    errors: dict[str, list[str]] = {}
    values: dict[str, object] = {}
    for field, clean, default in (
        ("user", clean_user, REQUIRED),
        ("ts", lambda value: clean_ts(value, now), now),
        ("path", clean_path, None),
    ):
        if field not in raw:
            if default == REQUIRED:
                errors[field] = [REQUIRED]
            values[field] = default
        elif raw[field] is None:
            errors[field] = [NOT_NULL]
        else:
            try:
                values[field] = clean(raw[field])
            except InvalidValue as error:
                errors[field] = [str(error)]
    return errors or Event(**values)


def clean_events(raw: object, now: float | None = None) -> list[Event]:
    """A batch of events as sent to ``POST /api/v1/events/`` (``events``) or the ingest task.

    An event without ``ts`` happened ``now``. Raises ``InvalidBatch`` naming every bad field (by
    the event's index) when any event is bad, so a batch is recorded whole or not at all. The size
    is checked first: an oversized batch costs no per-event work.
    """
    now = clock.now() if now is None else now
    if not isinstance(raw, list):
        raise InvalidBatch({"events": [f'Expected a list of items but got type "{type(raw).__name__}".']})
    if not raw:
        raise InvalidBatch({"events": ["This list may not be empty."]})
    limit = conf.settings.MAX_BATCH
    if len(raw) > limit:
        raise InvalidBatch({"events": [f"At most {limit} events per request; got {len(raw)}."]})
    cleaned = [_clean_event(item, now) for item in raw]
    errors = {str(index): found for index, found in enumerate(cleaned) if not isinstance(found, Event)}
    if errors:
        raise InvalidBatch({"events": errors})
    return cleaned


def iso(ts: float) -> str:
    """Epoch seconds as an ISO 8601 UTC string with milliseconds, as the API shows times."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
