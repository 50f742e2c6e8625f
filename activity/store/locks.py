"""A Redis lock, after python-redis-lock: SET NX PX with a random token, so it always has a TTL, and a
compare-and-delete release, so a holder whose lock expired never deletes the next holder's. Releasing
pushes one element on the lock's announcement list, which waiters BLPOP and pass on rather than poll."""

from __future__ import annotations

import logging
import secrets
import time

from activity.errors import StoreTimeout, StoreUnavailable
from activity.store import keys
from activity.store.client import Client
from activity.store.scripts import LuaScript

logger = logging.getLogger("activity.services.locks")

ACQUIRE = LuaScript("lock_acquire")
RELEASE = LuaScript("lock_release")
# A BLPOP step stays below the connection's socket timeout, so an idle wait never reads as a failure.
BLOCK_SHARE_OF_TIMEOUT = 0.8
# Seconds between tries of a release that Redis refused (doubling up to the second figure).
RELEASE_RETRY_DELAYS = (0.05, 1.0)


class Lock:
    """One attempt at holding lock ``name`` for ``ttl_ms``, with its own random token:
    ``with Lock(...) as acquired:`` tries once, never waits, and releases on leaving if it holds.

    ``retry_release``: a release that finds Redis unavailable is tried again until the lock would
    have expired anyway, so a scheduled job whose run failed on a paused or restarting Redis does
    not make the runs after it skip for the rest of its TTL. Off for locks a request holds, which
    must answer now."""

    def __init__(self, client: Client, name: str, ttl_ms: int, retry_release: bool = False) -> None:
        self.client = client
        self.name = name
        self.key = keys.lock(name)
        self.signal = keys.lock_signal(name)
        self.ttl_ms = int(ttl_ms)
        self.retry_release = retry_release
        self.token = secrets.token_hex(16)
        self.acquired = False
        self.expires = 0.0

    def acquire(self) -> bool:
        """Take the lock if it is free; never waits."""
        started = time.monotonic()
        self.acquired = ACQUIRE(self.client, [self.key, self.signal], [self.token, self.ttl_ms]) == 1
        self.expires = started + self.ttl_ms / 1000
        return self.acquired

    def release(self) -> bool:
        """Release the lock if it is still ours and announce it; False means it had expired meanwhile."""
        self.acquired = False
        delay, longest = RELEASE_RETRY_DELAYS
        while True:
            try:
                return RELEASE(self.client, [self.key, self.signal], [self.token, self.ttl_ms]) == 1
            except StoreUnavailable as error:
                if not self.retry_release or time.monotonic() + delay >= self.expires:
                    raise
                logger.warning("lock %s not released (%s); trying again in %.2fs", self.key, error, delay)
            time.sleep(delay)
            delay = min(2 * delay, longest)

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
