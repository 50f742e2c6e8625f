"""Scripts are called by SHA and survive SCRIPT FLUSH and a Redis restart, pipelines included."""

from __future__ import annotations

from activity.store import keys
from activity.store import last_seen as store
from activity.store.client import StandaloneClient
from project.redis_server import PrivateRedis
from tests.redis_counts import CommandDelta


def _queue_and_run(client, transaction: bool, scores) -> list:
    pipe = client.pipeline(transaction=transaction)
    moved_at = store.queue_update(pipe, scores, now=1.0)
    pipe.zcard(keys.last_seen())
    results = pipe.execute()
    return [sum(results[at] for at in moved_at), results[-1]]


def test_plain_call_after_script_flush(redis_client):
    redis_client.script_flush()
    assert store.update(redis_client, {"a": 10.0}, now=1.0) == 1
    redis_client.script_flush()
    assert store.update(redis_client, {"a": 11.0}, now=1.0) == 1
    assert store.get(redis_client, "a") == 11.0


def test_pipelines_after_script_flush(redis_client):
    for transaction in (False, True):
        redis_client.script_flush()
        assert _queue_and_run(redis_client, transaction, {f"t{transaction}": 5.0})[0] == 1
    # The other commands of the pipeline ran exactly once: one new member per pipeline.
    assert redis_client.zcard(keys.last_seen()) == 2


def test_pipeline_costs_no_script_exists_round_trip(redis_client):
    store.update(redis_client, {"warm": 1.0}, now=1.0)  # the script is loaded
    with CommandDelta(redis_client) as delta:
        _queue_and_run(redis_client, False, {"b": 2.0})
    assert delta.calls["evalsha"] == 1
    assert delta.calls["zcard"] == 1
    assert not [name for name in delta.calls if name.startswith("script")]


def test_scripts_survive_a_server_restart():
    with PrivateRedis() as server:
        client = StandaloneClient.from_url(server.url, decode_responses=True)
        assert store.update(client, {"a": 1.0}, now=1.0) == 1
        server.restart()  # nothing persisted: data and script cache are gone
        # The re-run script lands after the pipeline's other commands (here ZCARD saw 0).
        assert _queue_and_run(client, True, {"a": 2.0})[0] == 1
        assert store.get(client, "a") == 2.0
        assert store.update(client, {"a": 3.0}, now=1.0) == 1
        client.close()
