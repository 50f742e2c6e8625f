"""A WSGI app answering with its worker's process id, for ``test_serving``: which worker served a
connection, whatever the service's own views do."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
