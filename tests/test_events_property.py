"""Properties of the one validator of events (activity.events.clean_events) and of the ingest
endpoint and task built on it: any JSON value is a batch of valid events or a refusal naming what is
wrong (202 or 400, never 500), and a refused batch leaves Redis exactly as it was."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone

import pytest
import redis
from django.conf import settings
from django.test import override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from rest_framework.exceptions import ValidationError

from activity.errors import InvalidBatch
from activity.events import MAX_PATH_LENGTH, MIN_TS, USER_ID_RE, Event, clean_events
from activity.store import keys
from activity.tasks import record_events
from activity.web.api.serializers import EventBatchSerializer, clean_batch

NOW = 1_790_000_000.0
REPEATABLE = hypothesis_settings(
    derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

# Any text, lone surrogates included (JSON's \u escapes can carry them).
text = st.text(st.characters() | st.characters(categories=["Cs"]), max_size=20)
numbers = (
    st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats()
    | st.sampled_from([0, -0.0, 1e-400, 0.0004, MIN_TS, NOW, NOW + 59, NOW + 61, 2**53, 1e308])
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=8,
)


def iso(offset: timedelta | None, low: datetime, high: datetime) -> st.SearchStrategy[str]:
    """ISO 8601 date-times between ``low`` and ``high``, with ``offset`` (None: without one)."""
    zone = None if offset is None else timezone(offset)
    return st.datetimes(min_value=low, max_value=high).map(lambda moment: moment.replace(tzinfo=zone).isoformat())


PAST = datetime(1971, 1, 1), datetime(2025, 12, 31)
ANY_TIME = datetime(1, 1, 1), datetime(9999, 12, 31)
valid_event = st.fixed_dictionaries(
    {"user": st.from_regex(USER_ID_RE, fullmatch=True) | st.integers(min_value=0, max_value=2**63)},
    optional={
        "ts": st.floats(min_value=MIN_TS, max_value=1.7e9) | iso(timedelta(hours=3), *PAST),
        "path": st.text(max_size=30),
    },
)
users = st.from_regex(USER_ID_RE, fullmatch=True) | st.integers() | st.sampled_from(["", "a b", "x" * 65]) | json_values
timestamps = numbers | iso(None, *ANY_TIME) | iso(timedelta(0), *ANY_TIME) | iso(timedelta(hours=-5), *ANY_TIME) | text
paths = text | st.text(max_size=3).map(lambda tail: "/" * MAX_PATH_LENGTH + tail) | json_values
any_event = st.fixed_dictionaries({}, optional={"user": users, "ts": timestamps, "path": paths}) | json_values
# Values that broke the validator or slipped through it once, to spoil one field of a valid event.
EDGES = [10**400, -(10**400), 0, -0.0, 1e-400, 0.0004, NOW + 61, math.nan, math.inf, True, None]
EDGES += ["2026-01-01T00:00:00", "2026-01-01", "1970-01-01T00:00:00Z", "/\ud800", "\udfff/", "", "x" * 65]
spoiled_event = st.builds(
    lambda event, field, value: {**event, field: value},
    valid_event,
    st.sampled_from(["user", "ts", "path"]),
    st.sampled_from(EDGES),
)
batches = (
    st.lists(valid_event, min_size=1, max_size=4)
    | st.lists(valid_event | spoiled_event, min_size=1, max_size=3)
    | st.lists(valid_event | any_event, min_size=1, max_size=3)
    | json_values
)


def check_batch(raw: object, now: float) -> list[Event] | dict:
    """The validator's answer; whatever it is, it must be one of the two allowed shapes."""
    try:
        found = clean_events(raw, now=now)
    except InvalidBatch as refused:
        assert set(refused.errors) == {"events"}
        assert json.loads(str(refused)) == refused.errors
        return refused.errors
    assert isinstance(raw, list) and len(found) == len(raw) > 0
    for event in found:
        assert USER_ID_RE.fullmatch(event.user)
        assert math.isfinite(event.ts) and MIN_TS <= event.ts <= now + 60
        if event.path is not None:
            assert len(event.path) <= MAX_PATH_LENGTH
            event.path.encode()  # valid Unicode (no lone surrogate), or this raises
    return found


@hypothesis_settings(REPEATABLE, max_examples=500)
@given(batches)
def test_clean_events_accepts_valid_events_or_raises_invalid_batch(raw):
    check_batch(raw, NOW)


@pytest.fixture
def raw_redis():
    """The run's Redis without response decoding, so DUMP can snapshot any value."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    yield client
    client.close()


def snapshot(raw_redis) -> dict[bytes, bytes]:
    """Every key of ours and its value, except request counters (throttles count every request)."""
    counters = tuple(f"{keys.prefix()}{family}".encode() for family in ("cache", "rate:"))
    return {
        key: raw_redis.dump(key)
        for key in raw_redis.scan_iter(match=f"{keys.prefix()}*")
        if not key.startswith(counters)
    }


@REPEATABLE
@given(batches)
def test_the_task_records_a_valid_batch_whole_or_raises_invalid_batch(raw_redis, raw):
    before = snapshot(raw_redis)
    try:
        result = record_events(raw)
    except InvalidBatch:
        assert snapshot(raw_redis) == before
    else:
        assert result["accepted"] == len(raw)


@REPEATABLE
@given(body=st.fixed_dictionaries({"events": batches}) | json_values)
def test_ingest_answers_202_or_400_and_a_400_writes_nothing(staff_api, raw_redis, body):
    before = snapshot(raw_redis)
    response = staff_api.post("/api/v1/events/", json.dumps(body), content_type="application/json")
    assert response.status_code in (202, 400), response.content
    if response.status_code == 400:
        assert snapshot(raw_redis) == before
    else:
        assert response.json()["accepted"] == len(body["events"])


bodies = (
    st.fixed_dictionaries({"events": batches}) | st.fixed_dictionaries({}, optional={"events": st.none()}) | json_values
)


@hypothesis_settings(REPEATABLE, max_examples=500)
@given(bodies)
def test_the_fast_path_and_the_documented_serializer_agree(body):
    """``clean_batch``, the ingest view's validation, answers what ``EventBatchSerializer`` (the
    OpenAPI document's) answers: the same events, or the same error body. A batch limit of 3 lets
    the generated batches (up to 4 events) pass it."""
    with override_settings(ACTIVITY_MAX_BATCH=3):
        serializer = EventBatchSerializer(data=body)
        valid = serializer.is_valid()
        try:
            found = clean_batch(body)
        except ValidationError as refused:
            assert not valid
            assert json.loads(json.dumps(refused.detail)) == json.loads(json.dumps(serializer.errors))
            return
    assert valid, serializer.errors
    assert found == [
        Event(user=event["user"], ts=event.get("ts", found[i].ts), path=event.get("path"))
        for i, event in enumerate(serializer.validated_data["events"])
    ]
