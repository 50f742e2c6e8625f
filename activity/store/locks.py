"""A Redis lock, after python-redis-lock: SET NX PX with a random token, so it always has a TTL, and a
compare-and-delete release, so a holder whose lock expired never deletes the next holder's; a take
sent again with the same token re-enters the lock its unanswered first request took. Releasing
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
# Seconds between tries of a request that Redis did not answer or refused (doubling up to the second figure).
RETRY_DELAYS = (0.05, 1.0)


class Lock:
    """One attempt at holding lock ``name`` for ``ttl_ms``, with its own random token:
    ``with Lock(...) as acquired:`` tries once, never waits for another holder, and releases on
    leaving if it holds.

    ``retry``: a request to take or release the lock that Redis did not answer (a pause, a restart,
    a timeout: it may have run) or refused is sent again, with the same token, until the lock would
    have expired anyway. A take whose reply was lost is then re-entered (the lock holds this
    token) rather than left to block every run until its TTL, and a release is not left undone: a
    scheduled job whose run met a stalled or restarting Redis does not make the runs after it skip.
    Off for locks a request holds, which must answer now."""

    def __init__(self, client: Client, name: str, ttl_ms: int, retry: bool = False) -> None:
        self.client = client
        self.name = name
        self.key = keys.lock(name)
        self.signal = keys.lock_signal(name)
        self.ttl_ms = int(ttl_ms)
        self.retry = retry
        self.token = secrets.token_hex(16)
        self.acquired = False
        self.expires = 0.0

    def acquire(self) -> bool:
        """Take the lock if it is free (or re-enter it, holding this token); never waits for another holder."""
        self.expires = time.monotonic() + self.ttl_ms / 1000
        self.acquired = self._run(ACQUIRE, "taken") == 1
        return self.acquired

    def release(self) -> bool:
        """Release the lock if it is still ours and announce it; False means it was not: it had expired
        meanwhile (or, sent again, an earlier try whose reply was lost had released it)."""
        self.acquired = False
        return self._run(RELEASE, "released") == 1

    def _run(self, script: LuaScript, outcome: str) -> int:
        """``script`` on this lock with this holder's token, sent again while Redis does not
        answer when ``retry`` says so (see the class)."""
        delay, longest = RETRY_DELAYS
        while True:
            try:
                return script(self.client, [self.key, self.signal], [self.token, self.ttl_ms])
            except StoreUnavailable as error:
                if not self.retry or time.monotonic() + delay >= self.expires:
                    raise
                logger.warning("lock %s not %s (%s); trying again in %.2fs", self.key, outcome, error, delay)
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
