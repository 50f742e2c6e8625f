"""The application ``make run`` serves with granian (``project/serving.py``): Django's WSGI handler
behind a small ASGI front that keeps slow and hostile clients from holding the process.

granian reads requests in its Rust event loop and closes a connection whose headers have not arrived
within its header timeout. The front then takes the body, asynchronously, with a deadline
(``BODY_TIMEOUT``: 408 and the connection closed) and a size cap (Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE``: 413), so a half-sent body holds a socket, never the thread that runs
Django. Only a complete request reaches Django, which runs on one thread per process
(``asgiref.wsgi.WsgiToAsgi``): no thread per connection, and no GIL contention between requests.
A request whose Content-Type names a charset Django would fail on (rot13, hex, ...) is refused with
415 before Django builds the request, where it would raise.

The collector: a warm process holds some 150,000 long-lived objects (Django, DRF, the URL resolvers,
...) that every full collection walks, 80-230 ms each (``python -m bench.gc_pauses``). So each
process collects and freezes the survivors (``gc.freeze``) once it has loaded the app, and again
after its ``WEB_GC_FREEZE_AFTER``-th request (default 100; 0 leaves the collector alone), once its
first requests have built what Django builds lazily (templates, ...): later full collections walk
only what was made since, 1-5 ms each.

A worker granian stops (a reload on SIGHUP, a recycle at the end of its lifetime, a shutdown) sends
the tracked activity its process still holds (``services.tracking``) in the lifespan's shutdown:
granian's workers are forked processes that end with ``os._exit``, which runs no ``atexit`` handler,
so without it each one lost its last batch time of tracked pages (``python -m bench.chaos``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from asgiref.wsgi import WsgiToAsgi
from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

BODY_TIMEOUT = float(os.environ.get("WEB_BODY_TIMEOUT") or 30)  # seconds from the headers to the body's end
GC_FREEZE_AFTER = int(os.environ.get("WEB_GC_FREEZE_AFTER") or 100)


class Refused(Exception):
    """A request answered by the front itself: ``status`` and a JSON ``detail``."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class ClientGone(Exception):
    """The client disconnected before its body was complete: nothing to answer."""


def _header(scope: Scope, name: bytes) -> str:
    return next((value.decode("latin-1") for key, value in scope["headers"] if key == name), "")


def _check_charset(scope: Scope) -> None:
    from activity.web.charsets import usable_charset  # once Django is set up

    for parameter in _header(scope, b"content-type").split(";")[1:]:
        key, _, value = parameter.strip().partition("=")
        charset = value.strip().strip('"')
        if key.strip().lower() == "charset" and charset and not usable_charset(charset):
            raise Refused(415, f"Unsupported charset {charset!r} in the Content-Type; send UTF-8.")


class Front:
    """ASGI app: refuses what Django cannot take, times the body, then hands the request to ``app``."""

    def __init__(
        self,
        app: Callable[[Scope, Receive, Send], Awaitable[None]],
        body_limit: int | None,
        freeze_after: int = GC_FREEZE_AFTER,
        on_shutdown: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self.body_limit = body_limit
        self.freeze_after = freeze_after
        self.on_shutdown = on_shutdown
        self.served = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
            return
        try:
            _check_charset(scope)
            declared = _header(scope, b"content-length")
            if self.body_limit is not None and declared.isdigit() and int(declared) > self.body_limit:
                raise Refused(413, f"Request body exceeds {self.body_limit} bytes.")
            await self.app(scope, self._timed(receive), _coroutine(send))
        except ClientGone:
            pass
        except Refused as refused:
            body = json.dumps({"detail": refused.detail}).encode()
            headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
            await send({"type": "http.response.start", "status": refused.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        self.served += 1
        if self.served == self.freeze_after:  # what the first requests built leaves the walks too
            self.collect_and_freeze()

    def collect_and_freeze(self) -> None:
        if self.freeze_after > 0:
            gc.collect()
            gc.freeze()

    async def lifespan(self, receive: Receive, send: Send) -> None:
        """ASGI lifespan: a process that has loaded the app freezes it before its first request, and
        runs ``on_shutdown`` once it has served its last."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.collect_and_freeze()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.on_shutdown is not None:
                    self.on_shutdown()  # blocking: nothing else is served any more
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _timed(self, receive: Receive) -> Receive:
        """``receive`` for the body: each message within what is left of ``BODY_TIMEOUT``, and the
        body no longer than ``body_limit``."""
        deadline = asyncio.get_running_loop().time() + BODY_TIMEOUT
        received = 0

        async def timed() -> Message:
            nonlocal received
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise Refused(408, f"The request body did not arrive within {BODY_TIMEOUT:g} s.") from None
            if message["type"] == "http.disconnect":
                raise ClientGone
            received += len(message.get("body", b""))
            if self.body_limit is not None and received > self.body_limit:
                raise Refused(413, f"Request body exceeds {self.body_limit} bytes.")
            return message

        return timed


def _coroutine(send: Send) -> Send:
    """``send`` as a coroutine function, which asgiref expects (granian's is a plain callable)."""

    async def sending(message: Message) -> None:
        await send(message)

    return sending


django_application = get_wsgi_application()

from activity.services.tracking import batches  # noqa: E402 (once Django is set up)

application = Front(WsgiToAsgi(django_application), settings.DATA_UPLOAD_MAX_MEMORY_SIZE, on_shutdown=batches.flush)
