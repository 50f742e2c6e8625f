"""The ways of running Django behind ``project.asgi``'s front that ``bench.servers`` measures beside
``make run``'s (Django on one thread of the process's, through an executor): the same front, body
limits, collector freezes and shutdown flush, only the hand-off to Django differs.

Imported by the workers ``bench.servers`` starts, never by the service: ``on_the_loop`` switches off
Django's guard against database calls on a thread with a running event loop in the process that
imports this module (``DJANGO_ALLOW_ASYNC_UNSAFE``, which ``check --deploy`` calls an error)."""

from __future__ import annotations

import contextvars
import os
from collections.abc import Awaitable, Callable

from asgiref.wsgi import WsgiToAsgi

from project.asgi import (
    Front,
    Message,
    Receive,
    Scope,
    Send,
    WSGIApplication,
    django_application,
    run_wsgi,
    send_answer,
    whole_body,
    wsgi_environ,
)
from project.asgi import application as service

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # for on_the_loop


class Asgiref:
    """asgiref's ``WsgiToAsgi`` (``make run``'s before): Django on a thread of asgiref's, each request
    handed to it with ``sync_to_async`` and each answer message sent back with ``async_to_sync``."""

    def __init__(self, wsgi: WSGIApplication) -> None:
        self.inner = WsgiToAsgi(wsgi)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:  # asgiref wants a coroutine function; granian's is not
            await send(message)

        await self.inner(scope, receive, sending)


class OnTheLoop:
    """Django on the event loop's own thread once the body is whole: no hand-off. Every request runs
    in one context of the process's, as on a WSGI thread (in each task's own, each would open a
    database connection of its own)."""

    def __init__(self, wsgi: WSGIApplication) -> None:
        self.wsgi = wsgi
        self.context = contextvars.copy_context()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await whole_body(receive)
        start, content = self.context.run(run_wsgi, self.wsgi, wsgi_environ(scope, body))
        await send_answer(start, content, receive, send)


def fronted(app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> Front:
    """``app`` behind the service's front, configured as ``make run``'s."""
    return Front(app, service.body_limit, service.freeze_after, service.on_shutdown)


asgiref = fronted(Asgiref(django_application))
on_the_loop = fronted(OnTheLoop(django_application))
