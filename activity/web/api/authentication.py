"""Token authentication without a database query per request: DRF's reads the token and its user
each time, which would make the database the bottleneck of machine ingest. A process keeps them
``TOKEN_CACHE_TTL`` seconds, so a deleted token or a changed user (or its permissions) reaches other
processes that late. A failed authentication counts as an anonymous request of the client's address
(``web.api.throttles``), 429 once the address is over that limit; a valid token is looked up and
authenticated first, whatever its address has spent, so clients retrying bad tokens behind the same
proxy lock no one else out."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user
from django.db import close_old_connections
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.http import HttpRequest
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from activity import clock
from activity.expiring import ExpiringCache
from activity.web.api import throttles

MAX_TOKENS = 10_000  # tokens remembered per process (the least recently used forgotten)
TOKEN_CACHE_TTL = 30  # seconds a process keeps a token and its user after reading them


tokens: ExpiringCache[tuple[Any, Token]] = ExpiringCache(MAX_TOKENS)


class CachedTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <key>``, read from the database at most once per ``TOKEN_CACHE_TTL``
    per process."""

    def authenticate(self, request: Request) -> tuple[Any, Token] | None:
        try:
            return super().authenticate(request)
        except AuthenticationFailed:
            throttles.count_unauthenticated(request)  # Throttled (429) once the address is over
            raise

    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        found = tokens.get(key)
        if found is None:
            found = super().authenticate_credentials(key)  # raises AuthenticationFailed when unknown
            tokens.put(key, found, clock.now() + TOKEN_CACHE_TTL)
        return found


@receiver(post_delete, sender=Token)
@receiver(post_save, sender=Token)
def _forget_token(sender: type[Token], instance: Token, **kwargs: Any) -> None:
    tokens.forget(instance.key)


# A caller's standing, as a long answer re-checks it, shared by all its answers in the process: one
# database check per caller and period, however many live streams it holds open.
STANDING_TTL = TOKEN_CACHE_TTL / 2
standings: ExpiringCache[bool] = ExpiringCache(MAX_TOKENS)


def still_allowed(request: Request, permission: str) -> Callable[[], Awaitable[bool]]:
    """A check, for a long answer (the live stream), that its caller may still read it: the token
    still in the database (not the process's token cache), or the same session still signed in as
    the same user; and the user still holding ``permission``. Checked again with the database at
    most every ``STANDING_TTL`` per caller, so a caller checking that often learns of a change
    within ``TOKEN_CACHE_TTL``. A check answered from ``standings`` stays on the event loop; only
    the database read goes to a thread of the loop's pool (Django's thread-sensitive
    ``sync_to_async`` would start a thread per stream and keep it while the stream lasts)."""
    user_pk = request.user.pk
    if isinstance(request.auth, Token):
        key = request.auth.key
        caller: tuple[str, ...] = ("token", key, permission)

        def current_user() -> Any:
            try:
                return TokenAuthentication().authenticate_credentials(key)[0]
            except AuthenticationFailed:
                return None

    else:
        session_key = request.session.session_key
        store = import_module(settings.SESSION_ENGINE).SessionStore
        caller = ("session", session_key or "", permission)

        def current_user() -> Any:
            signed_in = HttpRequest()
            signed_in.session = store(session_key)
            return get_user(signed_in)

    def read() -> bool:
        try:
            user = current_user()
            return bool(user is not None and user.is_authenticated and user.pk == user_pk and user.has_perm(permission))
        finally:
            close_old_connections()  # as a request's end would: the pool's thread serves no request

    async def check() -> bool:
        found = standings.get(caller)
        if found is None:
            found = await asyncio.to_thread(read)
            standings.put(caller, found, clock.now() + STANDING_TTL)
        return found

    return check
