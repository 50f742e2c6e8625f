"""gunicorn's settings for ``make run`` and ``bench/http.py``: ``gunicorn -c project/gunicorn.conf.py``.

gthread workers: each worker process answers keep-alive connections itself and runs a few threads,
so a request that waits on Redis or the database (a reader waiting for a report rebuild blocks up to
``ACTIVITY_REPORT_WAIT`` s) holds one thread, not a whole process. The environment sets the sizes:
``WEB_CONCURRENCY`` worker processes (default two per CPU this process may run on) and
``WEB_THREADS`` threads each (default 4); ``HOST`` and ``PORT`` as for the rest of the project. Any
other gunicorn flag can be added through ``GUNICORN_CMD_ARGS`` (``--access-logfile -`` for example).
The app is not preloaded: each worker imports Django and opens its own Redis and database
connections after the fork.
"""

import os

wsgi_app = "project.wsgi:application"
bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY") or 2 * len(os.sched_getaffinity(0)))
threads = int(os.environ.get("WEB_THREADS") or 4)
# Without a proxy in front, browsers keep connections open between page loads.
keepalive = 5


def child_exit(server: object, worker: object) -> None:
    """A worker's live gauges leave /metrics with it (prometheus-client's multiprocess mode)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
