"""The lock never deletes another holder's lock and never outlives its TTL."""

import time

from activity.store import keys
from activity.store.locks import Lock, LockNotOwned


def test_only_one_holder(redis_client):
    first, second = Lock(redis_client, keys.lock("t"), 5000), Lock(redis_client, keys.lock("t"), 5000)
    assert first.acquire()
    assert not second.acquire()
    assert 0 < redis_client.pttl(keys.lock("t")) <= 5000


def test_expired_holder_cannot_release_or_extend_the_new_holders_lock(redis_client):
    old = Lock(redis_client, keys.lock("t"), 100)
    assert old.acquire()
    time.sleep(0.2)
    new = Lock(redis_client, keys.lock("t"), 5000)
    assert new.acquire()
    assert old.release() is False
    try:
        old.extend()
        raise AssertionError("extend of a lost lock must raise")
    except LockNotOwned:
        pass
    assert new.owned()
    assert redis_client.pttl(keys.lock("t")) > 1000
    assert new.release() is True
    assert redis_client.exists(keys.lock("t")) == 0


def test_dead_holder_is_replaced_after_ttl(redis_client):
    assert Lock(redis_client, keys.lock("t"), 150).acquire()  # never released: the holder "died"
    waiting = Lock(redis_client, keys.lock("t"), 5000)
    assert not waiting.acquire()
    time.sleep(0.25)
    assert waiting.acquire()
