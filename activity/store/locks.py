"""A Redis lock: ``SET key token NX PX ttl``, released and extended by compare-token scripts.

Never SETNX then EXPIRE (a crash between the two leaves a lock forever), never a lock without a
TTL, never a plain DEL to release (a holder whose lock expired would delete the next holder's).
"""

from __future__ import annotations

import secrets

import redis

from activity.store.scripts import LuaScript

RELEASE = LuaScript("lock_release")
EXTEND = LuaScript("lock_extend")


class LockNotOwned(RuntimeError):
    """The lock expired (or was taken over) before its holder released or extended it."""


class Lock:
    """One attempt at holding ``key`` for ``ttl_ms``; a fresh random token per instance."""

    def __init__(self, client: redis.Redis, key: str, ttl_ms: int) -> None:
        self.client = client
        self.key = key
        self.ttl_ms = int(ttl_ms)
        self.token = secrets.token_hex(16)

    def acquire(self) -> bool:
        """Take the lock if it is free; never waits."""
        return bool(self.client.set(self.key, self.token, nx=True, px=self.ttl_ms))

    def release(self) -> bool:
        """Delete the lock if it is still ours; False means it had expired meanwhile."""
        return RELEASE(self.client, [self.key], [self.token]) == 1

    def extend(self, ttl_ms: int | None = None) -> None:
        """Reset the TTL of a lock we hold; raises ``LockNotOwned`` if we no longer do."""
        if EXTEND(self.client, [self.key], [self.token, int(ttl_ms or self.ttl_ms)]) != 1:
            raise LockNotOwned(self.key)

    def owned(self) -> bool:
        return self.client.get(self.key) == self.token

    def __enter__(self) -> Lock:
        if not self.acquire():
            raise LockNotOwned(f"{self.key} is held by another client")
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
