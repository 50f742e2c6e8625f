"""gunicorn's settings for ``make run`` and ``bench/http.py``: ``gunicorn -c project/gunicorn.conf.py``.

gthread workers: each worker process answers keep-alive connections itself (no TCP handshake per
request, as sync workers would pay without a proxy in front), with one request thread by default:
the service's requests are Python work with short waits on Redis and the database, and more threads
per process only contend for the GIL (``bench.http``: a tracked signed-in page at 0.36x its floor
with 4 threads, 0.83x with 2, 0.77-0.95x with 1). The environment sets the sizes: ``WEB_CONCURRENCY``
worker processes (default two per CPU this process may run on) and ``WEB_THREADS`` threads each
(default 1; raise it if many readers may wait at once on cold report rebuilds, up to twice
``activity.services.reports.WAIT_S`` s each); ``HOST`` and ``PORT`` as for the rest of the project. Any
other gunicorn flag can be added through ``GUNICORN_CMD_ARGS`` (``--access-logfile -`` for example).
The app is not preloaded: each worker imports Django and opens its own Redis and database
connections after the fork.

Connections: with one shared listening socket, whichever worker wakes first accepts a new
connection, and a keep-alive connection stays with the worker that accepted it. A burst of new
connections (a load balancer's pool, a load generator) lands unevenly: in ``bench.http`` runs two of
four workers served about 10x the requests of the other two, and most cases' req/s swung by
16-30% from one 2 s measurement to the next. So on Linux each worker binds its own socket
(``SO_REUSEPORT``; ``WEB_REUSE_PORT=0`` goes back to the shared one) and the kernel spreads new
connections across them by their addresses: the swing fell to 4-15%. The price: a connection still
waiting in a worker's own queue when that worker exits (a restart, a ``HUP`` reload) is reset rather
than taken by another worker, unless the kernel migrates it (``net.ipv4.tcp_migrate_req=1``, Linux
5.14+).

Garbage collection: a warm worker holds some 150,000 long-lived objects (Django, DRF, the URL
resolvers, ...), and every full collection walks them all: 80-230 ms on this kind of machine, every
15-20 s of load in a busy worker, while its connections wait (``python -m bench.gc_pauses``). So a
worker collects and freezes the survivors (``gc.freeze``) once it has booted, before it takes a
connection, and again after its ``WEB_GC_FREEZE_AFTER``-th request (default 100; 0 leaves the
collector alone), once its first requests have built what Django builds lazily (URL resolvers,
templates, ...): that second collection walks only what was made since boot, and later full
collections only what was made since, 1-5 ms each.
"""

import gc
import itertools
import os
import sys

wsgi_app = "project.wsgi:application"
bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY") or 2 * len(os.sched_getaffinity(0)))
threads = int(os.environ.get("WEB_THREADS") or 1)
# Without a proxy in front, browsers keep connections open between page loads.
keepalive = 5
# A listening socket per worker ("Connections" above); Linux only: BSD and macOS do not balance
# connections across such sockets.
reuse_port = os.environ.get("WEB_REUSE_PORT", "1" if sys.platform.startswith("linux") else "0") != "0"
gc_freeze_after = int(os.environ.get("WEB_GC_FREEZE_AFTER") or 100)
_served = itertools.count(1)  # this worker's requests (the master serves none before the fork)


def _collect_and_freeze() -> None:
    gc.collect()
    gc.freeze()


def post_worker_init(worker: object) -> None:
    """A booted worker, before its first connection: its objects leave the collector's walks."""
    if gc_freeze_after > 0:
        _collect_and_freeze()


def post_request(worker: object, req: object, environ: object, resp: object) -> None:
    """The worker's ``gc_freeze_after``-th request: what its first requests built leaves them too."""
    if next(_served) == gc_freeze_after:
        _collect_and_freeze()


def child_exit(server: object, worker: object) -> None:
    """A worker's live gauges leave /metrics with it (prometheus-client's multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
