"""The ingest task validates exactly like the API and refuses bad batches instead of retrying."""

from __future__ import annotations

import json

import pytest

from activity.errors import InvalidBatch
from activity.tasks import record_events
from tests.last_seen_state import stored


def test_good_batch_is_recorded_and_replay_is_harmless(redis_client):
    batch = [{"user": "1", "ts": 100}, {"user": "2", "ts": "1970-01-01T00:03:20Z"}]
    assert record_events(batch) == {"accepted": 2, "last_seen_updated": 2}
    assert record_events(batch) == {"accepted": 2, "last_seen_updated": 0}
    assert stored(redis_client).get("2") == 200.0


def test_bad_batch_raises_with_api_error_shape_and_writes_nothing(redis_client):
    with pytest.raises(InvalidBatch) as error:
        record_events([{"user": "1", "ts": 100}, {"user": "bad id"}])
    assert list(json.loads(str(error.value))["events"]["1"]) == ["user"]
    assert stored(redis_client) == {}


def test_invalid_batch_is_not_in_autoretry():
    assert not issubclass(InvalidBatch, record_events.autoretry_for)


@pytest.mark.parametrize(
    ("event", "field"),
    [
        pytest.param({"user": "1", "ts": 10**400}, "ts", id="ts-400-digit-integer"),
        pytest.param({"user": "1", "ts": -(10**400)}, "ts", id="ts-negative-400-digit-integer"),
        pytest.param({"user": "1", "ts": -0.0}, "ts", id="ts-minus-zero"),
        pytest.param({"user": "1", "ts": "2026-01-01T00:00:00"}, "ts", id="ts-without-offset"),
        pytest.param({"user": "1", "path": "/\ud800"}, "path", id="path-lone-surrogate"),
        pytest.param({"user": 10**5000}, "user", id="user-5000-digit-integer"),
    ],
)
def test_values_that_broke_the_task_are_an_invalid_batch(redis_client, event, field):
    """Each raised something other than InvalidBatch (OverflowError, ...) or was stored as 1970."""
    with pytest.raises(InvalidBatch) as error:
        record_events([event])
    assert list(json.loads(str(error.value))["events"]["0"]) == [field]
    assert stored(redis_client) == {}
