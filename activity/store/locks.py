"""A Redis lock with its waiters' signal, after python-redis-lock.

``SET key token NX PX ttl`` with a random token, released by a compare-token script:
never SETNX then EXPIRE (a crash between the two leaves a lock forever), never a lock without a
TTL, never a plain DEL to release (a holder whose lock expired would delete the next holder's).

Each lock owns an announcement list. Taking the lock clears it; releasing pushes one element onto
it, so clients that wait for the holder's work (``wait``) block on BLPOP instead of polling, and
each one woken pushes the element back for the next.
"""

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
    """One attempt at holding lock ``name`` for ``ttl_ms``; a fresh random token per instance.

    ``with Lock(client, name, ttl_ms) as acquired:`` tries once (never waits): ``acquired`` says
    whether the block holds the lock, and leaving the block releases it if so.
    """

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
    """Block until lock ``name``'s holder announces its release, for at most ``seconds`` (capped
    below the socket timeout); True when an announcement came. The announcement is passed on for
    the next waiter and kept for ``ttl_ms``.
    """
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
