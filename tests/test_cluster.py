"""On a real Redis Cluster (``--redis-cluster``): commands spanning slots fail loudly, scripts
recover from NOSCRIPT on every node, and a primary killed mid-test leaves pages served, the API at
503 for its slots, nothing half-written, and everything working again when it comes back.
Skipped on a standalone run."""

from __future__ import annotations

import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError
from redis.retry import Retry

from activity.errors import StoreTimeout, StoreUnavailable
from activity.events import Event
from activity.services import ingest
from activity.services.tracking import fail_open
from activity.store import keys
from activity.store import last_seen as last_seen_store
from activity.store.client import get_client, is_cluster, unavailable_reason
from tests.clients import Client
from tests.redis_counts import CommandDelta


@pytest.fixture
def cluster(private_cluster, redis_client):
    if private_cluster is None or not is_cluster(redis_client):
        pytest.skip("needs the --redis-cluster run")
    return private_cluster


def nodes_of(client, *names: str) -> set[str]:
    return {client.get_node_from_key(name).name for name in names}


def test_a_script_or_transaction_spanning_slots_fails_loudly(cluster, redis_client):
    crossing = [keys.last_seen(0), keys.session("42"), keys.tombstones("ls:0")]  # {ls:0} and {ses}: two slots
    with pytest.raises(RedisClusterException, match="same key slot"):
        last_seen_store.ZADD_UNLESS_SMALLER(redis_client, crossing, ["1", "5", "a"])
    multi = redis_client.pipeline(transaction=True)
    multi.incr(keys.page_views(0, "20261123"))
    multi.incr(keys.health())
    with pytest.raises(RedisClusterException, match="same slot"):
        multi.execute()
    assert redis_client.exists(keys.last_seen(0), keys.session("42"), keys.page_views(0, "20261123")) == 0


def test_scripts_recover_from_noscript_on_every_node(cluster, redis_client):
    partitions = [keys.last_seen(i) for i in range(16)]
    assert len(nodes_of(redis_client, *partitions)) == len(cluster.nodes)  # all three primaries
    redis_client.script_flush()  # every primary forgets every script
    pipe = redis_client.pipeline(transaction=False)
    for i, key in enumerate(partitions):
        script_keys = [key, keys.last_seen_dirty(i), keys.tombstones(f"ls:{i}")]
        pipe.script(last_seen_store.ZADD_UNLESS_SMALLER, script_keys, ["1", "7", "u"])
    with CommandDelta(redis_client) as delta:
        assert pipe.execute() == [1] * 16
    # 16 NOSCRIPT replies in the pipeline; the first re-run meets NOSCRIPT too, loads the script on
    # every primary and runs; the 15 others just run.
    assert delta.calls["evalsha"] == 16 + 2 + 15
    assert delta.calls["script|load"] == len(cluster.nodes)


def test_healthz_reports_the_cluster_state_to_staff(cluster, client, admin_client, redis_client):
    assert client.get("/healthz").json() == {"redis": "ok", "database": "ok"}
    body = admin_client.get("/healthz").json()
    assert body["redis_cluster"] == f"ok: {len(cluster.nodes)} primaries, 16384 of 16384 slots ok"


def dump(cluster, node_names: set[str]) -> dict[str, bytes]:
    """Every key of the run on the given nodes with its serialized value (``DUMP``), but the rate
    limiter's counters (a throttle counts a request it then lets through)."""
    found = {}
    for node in cluster.nodes:
        if f"127.0.0.1:{node.port}" not in node_names:
            continue
        with redis.Redis(port=node.port) as raw:
            for key in raw.scan_iter(match=f"{keys.prefix()}*"):
                if not key.decode().startswith(f"{keys.prefix()}rate:"):
                    found[key.decode()] = raw.dump(key)
    return found


@pytest.mark.django_db
def test_a_primary_killed_pages_served_api_503_nothing_half_written_then_back(cluster, redis_client, staff, staff_api):
    events = {"events": [{"user": "alice", "path": "/pricing"}, {"user": "bob", "path": "/docs"}]}
    assert staff_api.post("/api/v1/events/", events, format="json").status_code == 202
    owner = redis_client.get_node_from_key(last_seen_store.partition_of("alice").seen)
    victim = next(node for node in cluster.nodes if node.port == owner.port)
    others = {f"127.0.0.1:{node.port}" for node in cluster.nodes} - {owner.name}
    browser = Client()
    browser.force_login(staff)
    victim.kill()
    try:
        before = dump(cluster, others)
        assert before  # the live nodes hold some of the run's keys (sessions, visitors, ...)
        answer = staff_api.post("/api/v1/events/", events, format="json")
        assert answer.status_code == 503 and answer["Retry-After"]
        assert staff_api.get("/api/v1/users/alice/last-seen/").status_code == 503
        with pytest.raises(StoreUnavailable):
            ingest.record_events([Event(user="alice", ts=1.0, path="/x")])
        fail_open.reset()
        assert browser.get("/api/v1/schema/").status_code == 200  # pages are served (fail open)
        assert fail_open.failures == 1
        # Each request's pipeline reached no node (its connection to the dead one failed before
        # anything was sent): the live nodes hold exactly what they held.
        assert dump(cluster, others) == before
        assert Client().get("/healthz").status_code == 503
    finally:
        victim.start()
        cluster.wait_until_ok()
    fail_open.reset()
    answer = staff_api.post("/api/v1/events/", events, format="json")
    assert answer.status_code == 202 and answer.json()["last_seen_updated"] == 2  # its data died with it
    assert staff_api.get("/api/v1/users/alice/last-seen/").status_code == 200
    assert Client().get("/healthz").status_code == 200


# Counts its run, then holds the node for ARGV[1] microseconds: longer than the client waits (but
# shorter than twice that, so a copy sent again when the wait ends runs too, before the client
# gives up on it).
SLOW_INCR = """
redis.call('INCR', KEYS[1])
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat
  t = redis.call('TIME')
until t[1] * 1000000 + t[2] - start > tonumber(ARGV[1])
return 1
"""


def test_a_pipeline_never_sends_a_command_twice_after_a_timeout(cluster, redis_client, settings):
    """redis-py's cluster pipeline re-sends a command whose reply timed out, though it ran: the
    store's does not, so a script is applied once (here redis-py's own applies it twice)."""
    counter = keys.page_views(0, "20261123")
    settings.ACTIVITY_REDIS_TIMEOUT = 1.0
    pipe = get_client().pipeline(transaction=False)
    pipe.execute_command("EVAL", SLOW_INCR, 1, counter, 1_200_000)
    with pytest.raises(StoreTimeout):
        pipe.execute()
    time.sleep(2.5)  # the script has ended; a second run would have too
    assert redis_client.get(counter) == "1"

    plain = RedisCluster.from_url(cluster.url, socket_timeout=1.0, retry=Retry(NoBackoff(), 0), decode_responses=True)
    theirs = plain.pipeline()
    theirs.execute_command("EVAL", SLOW_INCR, 1, counter, 1_200_000)
    with pytest.raises(RedisError):
        theirs.execute()
    time.sleep(2.5)
    assert redis_client.get(counter) == "3"  # sent again while the first still ran: applied twice
    plain.close()


def owner_of(cluster, redis_client, key: str) -> tuple[redis.Redis, int]:
    """A plain client to the node serving ``key``'s slot, and the slot."""
    node = redis_client.get_node_from_key(key)
    return redis.Redis(port=node.port), redis_client.keyslot(key)


@pytest.mark.django_db
def test_a_slot_not_served_is_clusterdown_503_then_back(cluster, redis_client, staff_api):
    """The node owning a slot stops serving it (CLUSTER DELSLOTS, as an operator's mistake or a
    half-done reshard leaves it): it answers CLUSTERDOWN, the store raises StoreUnavailable and the
    API 503; serving the slot again brings it back."""
    events = {"events": [{"user": "alice", "path": "/pricing"}]}
    assert staff_api.post("/api/v1/events/", events, format="json").status_code == 202
    owner, slot = owner_of(cluster, redis_client, last_seen_store.partition_of("alice").seen)
    assert owner.cluster("DELSLOTS", slot)
    try:
        with pytest.raises(redis.RedisError) as refused:
            owner.get(last_seen_store.partition_of("alice").seen)
        assert unavailable_reason(refused.value) == "CLUSTERDOWN", refused.value
        with pytest.raises(StoreUnavailable) as raised:
            ingest.record_events([Event(user="alice", ts=1.0, path="/x")])
        assert raised.value.reason == "CLUSTERDOWN"
        answer = staff_api.post("/api/v1/events/", events, format="json")
        assert answer.status_code == 503 and answer["Retry-After"]
    finally:
        owner.cluster("ADDSLOTS", slot)
    fail_open.reset()
    assert staff_api.post("/api/v1/events/", events, format="json").status_code == 202


@pytest.mark.django_db
def test_a_slot_being_migrated_is_tryagain_503_nothing_written(cluster, redis_client, staff_api):
    """While a slot migrates, a command naming several of its keys, some not moved yet and some
    already gone, answers TRYAGAIN: the store raises StoreUnavailable, the API answers 503."""
    events = {"events": [{"user": "alice", "path": "/pricing"}]}
    assert staff_api.post("/api/v1/events/", events, format="json").status_code == 202
    owner, slot = owner_of(cluster, redis_client, last_seen_store.partition_of("alice").seen)
    target = next(node for node in cluster.nodes if node.port != owner.connection_pool.connection_kwargs["port"])
    target_client = redis.Redis(port=target.port)
    owner_id, target_id = owner.cluster("MYID"), target_client.cluster("MYID")
    assert target_client.cluster("SETSLOT", slot, "IMPORTING", owner_id)
    assert owner.cluster("SETSLOT", slot, "MIGRATING", target_id)
    try:
        with pytest.raises(StoreUnavailable) as raised:
            ingest.record_events([Event(user="alice", ts=1.0, path="/x")])
        assert raised.value.reason == "TRYAGAIN", repr(raised.value.__cause__)
        answer = staff_api.post("/api/v1/events/", events, format="json")
        assert answer.status_code == 503 and answer["Retry-After"]
    finally:
        owner.cluster("SETSLOT", slot, "STABLE")
        target_client.cluster("SETSLOT", slot, "STABLE")
    fail_open.reset()
    assert staff_api.post("/api/v1/events/", events, format="json").status_code == 202
