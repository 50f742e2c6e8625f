"""A Redis lock, after python-redis-lock: SET NX PX with a random token, so it always has a TTL, and a
compare-and-delete release, so a holder whose lock expired never deletes the next holder's. Releasing
pushes one element on the lock's announcement list, which waiters BLPOP and pass on rather than poll."""

from __future__ import annotations

import logging
import secrets

from activity.errors import StoreTimeout
from activity.store import keys
from activity.store.client import Client
from activity.store.scripts import LuaScript

logger = logging.getLogger("activity.services.locks")

ACQUIRE = LuaScript("lock_acquire")
RELEASE = LuaScript("lock_release")
# A BLPOP step stays below the connection's socket timeout, so an idle wait never reads as a failure.
BLOCK_SHARE_OF_TIMEOUT = 0.8


class Lock:
    """One attempt at holding lock ``name`` for ``ttl_ms``, with its own random token:
    ``with Lock(...) as acquired:`` tries once, never waits, and releases on leaving if it holds."""

    def __init__(self, client: Client, name: str, ttl_ms: int) -> None:
        self.client = client
        self.name = name
        self.key = keys.lock(name)
        self.signal = keys.lock_signal(name)
        self.ttl_ms = int(ttl_ms)
        self.token = secrets.token_hex(16)
        self.acquired = False

    def acquire(self) -> bool:
        """Take the lock if it is free; never waits."""
        self.acquired = ACQUIRE(self.client, [self.key, self.signal], [self.token, self.ttl_ms]) == 1
        return self.acquired

    def release(self) -> bool:
        """Release the lock if it is still ours and announce it; False means it had expired meanwhile."""
        self.acquired = False
        return RELEASE(self.client, [self.key, self.signal], [self.token, self.ttl_ms]) == 1

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        if self.acquired and not self.release():
            logger.warning("lock %s expired before its holder released it; its TTL is too short", self.key)


def wait(client: Client, name: str, seconds: float, ttl_ms: int) -> bool:
    """Block until lock ``name``'s holder announces its release, at most ``seconds`` (capped below
    the socket timeout, so a quiet wait is not a failure); True when it came. Passed on to the next waiter."""
    socket_timeout = client.get_connection_kwargs().get("socket_timeout") or seconds
    signal = keys.lock_signal(name)
    try:
        popped = client.blpop([signal], timeout=max(0.01, min(seconds, socket_timeout * BLOCK_SHARE_OF_TIMEOUT)))
    except StoreTimeout:
        # The reply came later than the socket timeout (a loaded server): redis-py has dropped
        # that connection, so nothing is lost; it counts as a wait with no announcement.
        return False
    if popped is None:
        return False
    relay = client.pipeline(transaction=True)
    relay.rpush(signal, popped[1])
    relay.pexpire(signal, ttl_ms)
    relay.execute()
    return True
