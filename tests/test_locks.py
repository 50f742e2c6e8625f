"""The lock never deletes another holder's lock, never outlives its TTL, and is not lost to a lost reply."""

import threading
import time

import pytest
import redis

from activity import conf
from activity.errors import StoreTimeout, StoreUnavailable
from activity.store import keys
from activity.store.client import get_client, is_cluster
from activity.store.locks import Lock, wait
from tests.celery_procs import wait_for
from tests.redis_counts import command_calls


def test_only_one_holder(redis_client):
    first, second = Lock(redis_client, "t", 5000), Lock(redis_client, "t", 5000)
    assert first.acquire()
    assert not second.acquire()
    assert 0 < redis_client.pttl(keys.lock("t")) <= 5000


def test_expired_holder_cannot_release_the_new_holders_lock(redis_client):
    old = Lock(redis_client, "t", 100)
    assert old.acquire()
    time.sleep(0.2)
    new = Lock(redis_client, "t", 5000)
    assert new.acquire()
    assert old.release() is False
    assert redis_client.get(keys.lock("t")) == new.token
    assert redis_client.pttl(keys.lock("t")) > 1000
    assert new.release() is True
    assert redis_client.exists(keys.lock("t")) == 0


def test_dead_holder_is_replaced_after_ttl(redis_client):
    assert Lock(redis_client, "t", 150).acquire()  # never released: the holder "died"
    waiting = Lock(redis_client, "t", 5000)
    assert not waiting.acquire()
    time.sleep(0.25)
    assert waiting.acquire()


def test_context_manager_holds_once_and_releases_only_its_own(redis_client):
    with Lock(redis_client, "t", 5000) as first:
        assert first
        with Lock(redis_client, "t", 5000) as second:
            assert not second
        assert redis_client.exists(keys.lock("t")) == 1  # the one that got nothing released nothing
    assert redis_client.exists(keys.lock("t")) == 0


def test_release_wakes_a_waiter_and_the_announcement_is_passed_on(redis_client):
    holder = Lock(redis_client, "t", 5000)
    assert holder.acquire()
    woken: list[tuple[bool, float]] = []

    def waiter() -> None:
        started = time.monotonic()
        woken.append((wait(redis_client, "t", 5.0, 5000), time.monotonic() - started))

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.1)
    assert woken == []  # blocked while the lock is held
    assert holder.release()
    thread.join(timeout=5)
    assert woken and woken[0][0] is True and woken[0][1] < 0.4  # one BLPOP step is 0.4 s: it woke on the release
    assert wait(redis_client, "t", 0.05, 5000) is True  # the woken waiter passed the announcement on
    assert 0 < redis_client.pttl(keys.lock_signal("t")) <= 5000


def test_a_new_holder_clears_old_announcements_and_a_lost_lock_announces_nothing(redis_client):
    first = Lock(redis_client, "t", 100)
    assert first.acquire() and first.release()
    assert redis_client.llen(keys.lock_signal("t")) == 1
    second = Lock(redis_client, "t", 100)
    assert second.acquire()
    assert redis_client.exists(keys.lock_signal("t")) == 0  # waiters now wait for this holder
    assert wait(redis_client, "t", 0.05, 5000) is False
    time.sleep(0.2)  # the lock expires under its holder
    assert second.release() is False
    assert redis_client.exists(keys.lock_signal("t")) == 0


def test_a_waiter_cut_short_by_the_server_reads_as_unavailable(redis_client):
    """CLIENT UNBLOCK ... ERROR (as a failover does to blocked clients) ends a BLPOP with UNBLOCKED:
    the waiter raises StoreUnavailable, which callers answer with 503, never a crash."""
    assert Lock(redis_client, "t", 5000).acquire()
    if is_cluster(redis_client):
        node = redis_client.get_node_from_key(keys.lock_signal("t"))
        server = redis.Redis(host=node.host, port=node.port)
    else:
        server = redis.Redis.from_url(conf.get("REDIS_URL"))
    raised: list[BaseException] = []

    def waiter() -> None:
        try:
            wait(redis_client, "t", 5.0, 5000)
        except StoreUnavailable as error:
            raised.append(error)

    thread = threading.Thread(target=waiter)
    thread.start()
    deadline = time.monotonic() + 5
    while not (blocked := [c for c in server.client_list() if c["cmd"] == "blpop"]):
        assert time.monotonic() < deadline, "the waiter never blocked"
        time.sleep(0.01)
    assert server.client_unblock(blocked[0]["id"], error=True)
    thread.join(timeout=5)
    assert len(raised) == 1 and isinstance(raised[0], StoreUnavailable)
    assert raised[0].reason == "UNBLOCKED"


def test_a_take_whose_reply_was_lost_is_reentered_by_its_token(stalling_redis, caplog):
    """A request to take the lock that times out while Redis stalls still runs once Redis wakes:
    without ``retry`` the lock is then held by a token nobody has, and every run skips until its
    TTL. With ``retry`` the holder sends it again with the same token, which re-enters the lock its
    lost request took: it holds the lock, and its release frees it for the next run."""
    client = get_client()
    first = Lock(client, "t", 5000)
    assert first.acquire() and first.release()  # loads the scripts: a stalled EVALSHA finds them
    lost = Lock(client, "t", 5000)
    with stalling_redis.stalled(1.5), pytest.raises(StoreTimeout):
        lost.acquire()
    wait_for(lambda: client.get(keys.lock("t")) == lost.token, 2, "the stalled request to run")
    assert not Lock(client, "t", 5000, retry=True).acquire()  # the harm: blocked by nobody's lock
    client.delete(keys.lock("t"))

    holder = Lock(client, "t", 5000, retry=True)
    sent = command_calls(client)["evalsha"]
    with stalling_redis.stalled(1.5):
        assert holder.acquire()
    assert command_calls(client)["evalsha"] - sent >= 2  # its first request's reply was lost: sent again
    assert "not taken" in caplog.text
    assert client.get(keys.lock("t")) == holder.token
    assert 4000 < client.pttl(keys.lock("t")) <= 5000  # as the first request set it: re-entry changes nothing
    assert holder.release()
    assert Lock(client, "t", 5000).acquire()  # the next run takes it
