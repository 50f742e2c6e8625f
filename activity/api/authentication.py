"""Token authentication without a database query per request.

DRF's ``TokenAuthentication`` reads the token and its user from the database on every request. A
machine posting events thousands of times a minute would make the database the bottleneck of an
ingest path that otherwise never touches it. Here each process keeps what it read for
``ACTIVITY_TOKEN_CACHE_TTL`` seconds: a deleted or rotated token keeps working in another process
for at most that long (in this process it stops at once: the token's delete signal evicts it),
and so does a change to the user (deactivated, staff status, permissions).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

from activity import clock, conf

MAX_TOKENS = 10_000  # tokens remembered per process (the least recently used forgotten)


class TokenCache:
    """key -> (user, token, expiry), bounded, thread-safe."""

    def __init__(self, size: int = MAX_TOKENS) -> None:
        self._found: OrderedDict[str, tuple[Any, Token, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.size = size

    def get(self, key: str) -> tuple[Any, Token] | None:
        with self._lock:
            found = self._found.get(key)
            if found is None:
                return None
            if found[2] <= clock.now():
                del self._found[key]
                return None
            self._found.move_to_end(key)
            return found[0], found[1]

    def put(self, key: str, user: Any, token: Token) -> None:
        ttl = conf.settings.TOKEN_CACHE_TTL
        if ttl <= 0:
            return
        with self._lock:
            self._found[key] = (user, token, clock.now() + ttl)
            self._found.move_to_end(key)
            while len(self._found) > self.size:
                self._found.popitem(last=False)

    def forget(self, key: str) -> None:
        with self._lock:
            self._found.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._found.clear()


tokens = TokenCache()


class CachedTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <key>``, the token and its user read from the database at most once
    per ``ACTIVITY_TOKEN_CACHE_TTL`` per process."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        found = tokens.get(key)
        if found is None:
            found = super().authenticate_credentials(key)  # raises AuthenticationFailed when unknown
            tokens.put(key, *found)
        return found


@receiver(post_delete, sender=Token)
@receiver(post_save, sender=Token)
def _forget_token(sender: type[Token], instance: Token, **kwargs: Any) -> None:
    tokens.forget(instance.key)
