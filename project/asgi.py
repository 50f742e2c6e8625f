"""The application ``make run`` serves with granian (``project/serving.py``): Django's WSGI handler,
on one thread of each process's, behind a small ASGI front that keeps slow and hostile clients from
holding the process.

granian reads requests in its Rust threads and closes a connection whose headers have not arrived
within its header timeout. The front then takes the body, asynchronously, with a deadline
(``BODY_TIMEOUT``: 408 and the connection closed) and a size cap (Django's
``DATA_UPLOAD_MAX_MEMORY_SIZE``: 413), so a half-sent body holds a socket, never Django. A request
whose Content-Type names a charset Django would fail on (rot13, hex, ...) is refused with 415 before
Django builds the request, where it would raise.

Only a complete request reaches Django (``OneThread``): handed, whole, to the one thread that runs
Django in the process, through an executor, and its whole answer handed back. One request at a time
per process, no thread per connection and no GIL contention between requests. An answer that
streams asynchronously (the live dashboard's event stream, docs/live.md) comes back unread, with
Django's part of the request ended (its closers and ``request_finished`` run on Django's thread),
and the event loop sends it as it comes until it ends or the client goes (``send_stream``): an open
stream holds no thread, nor its request, only its socket, its generators and two tasks.
asgiref's ``WsgiToAsgi``, which did the same with ``sync_to_async`` and sent each answer message
back with ``async_to_sync``, spent 1.58x gunicorn's CPU per request on the bare view; this, 0.73x,
within the noise of Django run on the event loop's own thread (0.69x), which would need Django's
async guard switched off (``python -m bench.servers``; docs/serving.md). The URLconf, and every view
with it, is imported as the process loads: a worker's first request spent 0.5-1.8 s on it while the
requests behind it waited.

The collector: a warm process holds some 150,000 long-lived objects (Django, DRF, the URL resolvers,
...) that every full collection walks, 80-230 ms each (``python -m bench.gc_pauses``). So each
process collects and freezes the survivors (``gc.freeze``) once it has loaded the app, and again
after its ``WEB_GC_FREEZE_AFTER``-th request (default 100; 0 leaves the collector alone), once its
first requests have built what Django builds lazily (templates, ...): later full collections walk
only what was made since, 1-5 ms each. The middle generation is then collected every
``MIDDLE_GENERATION_EVERY`` young collections rather than CPython's 10 (before 3.14): under load a
worker makes 100 or more young collections a second, so at 10 whatever lives about a second (each
open live stream's wait for the next read, a slow request) outlived the middle generation into the
old one, and its full collections, walking every open stream's objects, took about 80 ms a second
with 2,000 streams open; at 200 such objects die in the middle generation, and full collections take
7-20 ms a second, with pauses about as long (``python -m bench.live``,
``python -m bench.gc_pauses``; docs/gc-freeze.md).

A worker granian stops (a reload on SIGHUP, a recycle at the end of its lifetime, a shutdown) sends
the tracked activity its process still holds (``services.tracking``) in the lifespan's shutdown:
granian's workers are forked processes that end with ``os._exit``, which runs no ``atexit`` handler,
so without it each one lost its last batch time of tracked pages (``python -m bench.chaos``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from importlib import import_module
from typing import Any

from django.conf import settings
from django.core.wsgi import get_wsgi_application
from django.http import StreamingHttpResponse

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
StartResponse = Callable[..., object]
WSGIApplication = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

BODY_TIMEOUT = float(os.environ.get("WEB_BODY_TIMEOUT") or 30)  # seconds from the headers to the body's end
GC_FREEZE_AFTER = int(os.environ.get("WEB_GC_FREEZE_AFTER") or 100)
MIDDLE_GENERATION_EVERY = 200  # young collections per collection of the middle generation (CPython: 10)
# Only the generational collector of CPython 3.11 to 3.13 has a middle generation; 3.14's incremental
# one reads the second threshold as how slowly it scans the old generation: there it is left alone.
GENERATIONAL = sys.version_info < (3, 14)


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
            await self.app(scope, self._timed(receive), send)
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
            if GENERATIONAL:
                young, _, old = gc.get_threshold()
                gc.set_threshold(young, MIDDLE_GENERATION_EVERY, old)

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
        body no longer than ``body_limit``. Once the body is whole, messages pass as they come: a
        streamed answer's handler waits on ``receive`` for the client's disconnect."""
        deadline = asyncio.get_running_loop().time() + BODY_TIMEOUT
        received = 0
        whole = False

        async def timed() -> Message:
            nonlocal received, whole
            if whole:
                return await receive()
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
            whole = not message.get("more_body")
            return message

        return timed


class OneThread:
    """ASGI app that runs a WSGI application (Django's handler) on one thread of its own, one whole
    request at a time, and sends its answer in one message, or, for an asynchronous stream, from
    the event loop as it comes (``send_answer``).

    The executor runs each call in its thread's own context, as a WSGI server's thread runs its
    requests: Django keeps its database connections in context variables, so the thread keeps its
    connection from one request to the next (``CONN_MAX_AGE``)."""

    def __init__(self, wsgi: WSGIApplication) -> None:
        self.wsgi = wsgi
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="django")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await whole_body(receive)
        environ = wsgi_environ(scope, body)
        start, content = await asyncio.get_running_loop().run_in_executor(self.thread, run_wsgi, self.wsgi, environ)
        await send_answer(start, content, receive, send)


async def whole_body(receive: Receive) -> io.BytesIO:
    """The request's body, every message of it, as the file WSGI reads."""
    body = io.BytesIO()
    while True:
        message = await receive()
        body.write(message.get("body", b""))
        if not message.get("more_body"):
            break
    body.seek(0)
    return body


def run_wsgi(wsgi: WSGIApplication, environ: dict[str, Any]) -> tuple[Message, bytes | StreamingHttpResponse]:
    """Call ``wsgi`` to its end: the answer's ``http.response.start`` message and its whole body; or,
    for an answer that streams asynchronously, the answer itself, closed (Django's part of the
    request ends here, on Django's thread), for the event loop to send as it comes."""
    start: Message = {"type": "http.response.start"}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: object = None) -> None:
        start["status"] = int(status[:3])
        start["headers"] = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]

    chunks = wsgi(environ, start_response)
    if isinstance(chunks, StreamingHttpResponse) and chunks.is_async:
        chunks.close()  # its closers and request_finished: the request is let go, the stream goes on
        return start, chunks
    try:
        return start, b"".join(chunks)
    finally:
        if hasattr(chunks, "close"):  # Django's request_finished: the request's database connections
            chunks.close()


async def send_answer(start: Message, content: bytes | StreamingHttpResponse, receive: Receive, send: Send) -> None:
    """Send what ``run_wsgi`` returned: a whole body in one message, a stream as it comes."""
    await send(start)
    if isinstance(content, bytes):
        await send({"type": "http.response.body", "body": content})
    else:
        await send_stream(content, receive, send)


async def send_stream(response: StreamingHttpResponse, receive: Receive, send: Send) -> None:
    """Send an asynchronous answer's chunks as they come, until it ends or the client goes away (an
    ``http.disconnect``), whichever is first, as Django's ASGI handler does: the other is cancelled,
    so a stream's generators are closed as its client leaves, not at its next chunk."""

    async def pump() -> None:
        async with contextlib.aclosing(aiter(response)) as chunks:
            async for chunk in chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def disconnect() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    tasks = (asyncio.ensure_future(disconnect()), asyncio.ensure_future(pump()))
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()  # nothing to a task already done
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task  # the cancelled one's cleanup; a pump's error, raised


def wsgi_environ(scope: Scope, body: io.BytesIO) -> dict[str, Any]:
    """The WSGI environ of an ASGI HTTP request (asgiref has its builder only as a method of its
    adapter). A header whose name has an underscore is dropped, as gunicorn and
    Django's runserver drop it: in the environ it would pass for the same name with a hyphen
    (``X_Forwarded_For`` for ``X-Forwarded-For``), one a proxy may have stripped."""
    root = scope.get("root_path", "")
    path = scope["path"]
    server = scope.get("server") or ("localhost", 80)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": root.encode().decode("latin-1"),
        "PATH_INFO": (path[len(root) :] if root and path.startswith(root) else path).encode().decode("latin-1"),
        "QUERY_STRING": scope["query_string"].decode("latin-1"),
        "SERVER_NAME": server[0],
        "SERVER_PORT": str(server[1] or 80),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "REMOTE_ADDR": scope["client"][0] if scope.get("client") else "",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        ASYNC_STREAMING: True,
    }
    for name, value in scope["headers"]:
        if b"_" in name:
            continue
        key = name.decode("latin-1").upper().replace("-", "_")
        if key not in ("CONTENT_LENGTH", "CONTENT_TYPE"):
            key = f"HTTP_{key}"
        text = value.decode("latin-1")
        environ[key] = f"{environ[key]},{text}" if key in environ else text
    return environ


django_application = get_wsgi_application()
import_module(settings.ROOT_URLCONF)  # now, not in a worker's first request (the first probe of bench.slow_clients)

from activity.services.tracking import batches  # noqa: E402 (once Django is set up)
from activity.web.api.live import ASYNC_STREAMING  # noqa: E402

application = Front(
    OneThread(django_application),
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE,
    on_shutdown=batches.flush,
)
