"""An ASGI app answering with its worker's process id, for ``test_serving``: which worker served a
connection, whatever the service's own views do."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any


async def application(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[..., Any]) -> None:
    if scope["type"] != "http":
        return
    body = str(os.getpid()).encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
