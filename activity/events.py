"""The event type and the rules every entry point (API, tasks, middleware) validates with: each
``clean_*`` returns the cleaned value or raises ``InvalidValue`` with a reason a client can act on."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from activity import clock, conf, metrics
from activity.errors import InvalidBatch, InvalidValue

USER_ID_PATTERN = r"[A-Za-z0-9_.:@-]{1,64}"
USER_ID_RE = re.compile(USER_ID_PATTERN)
USER_ID_RULE = "Must be 1-64 characters from A-Z, a-z, 0-9 and _ . : @ -."
# The integers whose decimal form is an id (at most 64 characters, a minus sign included).
MIN_INT_USER, MAX_INT_USER = -(10**63 - 1), 10**64 - 1
MAX_PATH_LENGTH = 2048
MIN_TS = 0.001
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
    # An integer too long to be an id is refused before str(), which is slow (or refused) on huge ones.
    if isinstance(value, int) and not MIN_INT_USER <= value <= MAX_INT_USER:
        raise InvalidValue(USER_ID_RULE)
    text = str(value)
    if not USER_ID_RE.fullmatch(text):
        raise InvalidValue(USER_ID_RULE)
    return text


def clean_ts(value: object, now: float | None = None) -> float:
    """Epoch seconds (a number, or ISO 8601 with an offset), rounded to the millisecond; at least
    ``MIN_TS`` (0, -0 and underflows are refused, not stored as 1970), at most ``MAX_FUTURE_SKEW`` ahead."""
    if isinstance(value, bool):
        raise InvalidValue("Must be a number of epoch seconds or an ISO 8601 string, not a boolean.")
    if isinstance(value, (int, float)):
        try:
            ts = float(value)
        except OverflowError:  # an integer beyond any float: far past or far future, said below
            ts = math.inf if value > 0 else -math.inf
        else:
            if not math.isfinite(ts):
                raise InvalidValue("Must be a finite number.")
    elif isinstance(value, str):
        ts = _iso_to_epoch(value)
    else:
        raise InvalidValue("Must be a number of epoch seconds or an ISO 8601 string.")
    if ts < MIN_TS:
        raise InvalidValue(f"Must be at least {MIN_TS} (one millisecond after 1970-01-01T00:00:00Z).")
    skew = conf.settings.MAX_FUTURE_SKEW
    if ts > (clock.now() if now is None else now) + skew:
        raise InvalidValue(f"Must not be more than {skew} seconds in the future.")
    return round(ts, 3)


def _iso_to_epoch(value: str) -> float:
    """Epoch seconds of an ISO 8601 date-time; one without an offset could be anyone's local time,
    so it is refused rather than taken as UTC."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidValue("Not a number or an ISO 8601 date-time.") from None
    if moment.tzinfo is None:
        raise InvalidValue("An ISO 8601 date-time must include an offset such as Z or +01:00.")
    return moment.timestamp()


def clean_path(value: object) -> str:
    """A path of at most ``MAX_PATH_LENGTH`` characters that encodes as UTF-8: a lone surrogate,
    which JSON's \\u escapes can carry, cannot be sent to Redis."""
    if not isinstance(value, str):
        raise InvalidValue("Must be a string.")
    if len(value) > MAX_PATH_LENGTH:
        raise InvalidValue(f"Must be at most {MAX_PATH_LENGTH} characters.")
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidValue("Must be valid Unicode text: no lone surrogate (\\ud800-\\udfff).") from None
    return value


def _clean_event(raw: object, now: float) -> Event | dict[str, list[str]] | list[str]:
    """The event, or its errors (by field; a null event's, as DRF's list field gives them)."""
    if raw is None:
        return [NOT_NULL]
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
    """A batch as the ingest API and task take it; an event without ``ts`` happened ``now``.
    Raises ``InvalidBatch`` naming every bad field by event index, so a batch is recorded whole or
    not at all; the size is checked first, so an oversized batch costs no per-event work."""
    now = clock.now() if now is None else now
    if not isinstance(raw, list):
        raise InvalidBatch({"events": [f'Expected a list of items but got type "{type(raw).__name__}".']})
    if not raw:
        raise InvalidBatch({"events": ["This list may not be empty."]})
    limit = conf.settings.MAX_BATCH
    if len(raw) > limit:
        metrics.EVENTS_REJECTED.inc(len(raw))
        raise InvalidBatch({"events": [f"Ensure this field has no more than {limit} elements."]})
    cleaned = [_clean_event(item, now) for item in raw]
    errors = {str(index): found for index, found in enumerate(cleaned) if not isinstance(found, Event)}
    if errors:
        metrics.EVENTS_REJECTED.inc(len(raw))
        raise InvalidBatch({"events": errors})
    return cleaned


def iso(ts: float) -> str:
    """Epoch seconds as an ISO 8601 UTC string with milliseconds, as the API shows times."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
