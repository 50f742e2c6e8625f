"""How ``make run`` and ``bench.http`` start the web server: granian, serving ``project.asgi``.

granian reads every connection in its Rust event loop, so a client that trickles its headers or
holds a half-sent body costs a socket, not a worker: with no buffering proxy in front, 64 such
sockets held for 60 s left fresh requests answering within 1 s (``python -m bench.slow_clients``).
A connection whose headers have not all arrived ``WEB_HEADER_TIMEOUT`` seconds after it opened is
closed (default 10); ``project.asgi`` gives the body ``WEB_BODY_TIMEOUT``. ``WEB_CONCURRENCY``
worker processes (default ``default_workers()``, one per CPU this process may run on), each running
Django on one thread of its own: the service's requests are Python work with short waits on Redis
and the database, so more threads per process only contend for the GIL, and more processes than
CPUs only take turns on them (granian warns at start when the workers outnumber the CPUs). A worker
that dies is started again. A worker serves up to ``BACKPRESSURE`` requests at once (granian's
default, its backlog over the workers, is 1,024 for a one-worker server): each open live stream is
one (``GET /api/v1/live/``, docs/live.md), so a worker holds thousands of dashboards open and still
takes new requests. A worker told to stop (a shutdown, a reload, the end of its lifetime) has
``WORKERS_KILL_TIMEOUT`` seconds to finish its requests, then granian kills it: granian waits for a
worker's open connections, and an open live stream never ends on its own (nor does a worker told to
stop while it starts). Its batches' thread has sent what it held by then. Any other granian option
goes through its own ``GRANIAN_*`` environment variables (``GRANIAN_ACCESS_LOG=1``, for example)."""

from __future__ import annotations

import os
from collections.abc import Mapping

APPLICATION = "project.asgi:application"
BACKPRESSURE = 8192  # requests a worker serves at once, open live streams included
WORKERS_KILL_TIMEOUT = 5  # seconds a stopping worker has to finish its requests


def default_workers() -> int:
    """Worker processes when ``WEB_CONCURRENCY`` is unset: the CPUs this process may run on, never
    more than the machine has (granian's warning)."""
    return len(os.sched_getaffinity(0))


def granian_command(python: str, env: Mapping[str, str], application: str = APPLICATION) -> list[str]:
    """The command line that serves ``application`` on ``HOST``:``PORT`` as ``env`` configures it."""
    workers = env.get("WEB_CONCURRENCY") or str(default_workers())
    header_timeout_ms = round(1000 * float(env.get("WEB_HEADER_TIMEOUT") or 10))
    return [
        python,
        "-m",
        "granian",
        "--interface",
        "asgi",
        "--host",
        env.get("HOST", "127.0.0.1"),
        "--port",
        env.get("PORT", "8000"),
        "--workers",
        workers,
        "--http",
        "1",
        "--no-ws",
        "--http1-header-read-timeout",
        str(header_timeout_ms),
        "--backpressure",
        str(BACKPRESSURE),
        "--respawn-failed-workers",
        "--workers-kill-timeout",
        str(WORKERS_KILL_TIMEOUT),
        application,
    ]
