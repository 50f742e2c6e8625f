"""The example project under granian as ``make run`` starts it (``bench.slow_clients.serve``), with a
superuser who has a password and a token: for tests of what only the production server does, such
as the live stream (Django's test servers are WSGI)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.harness import end
from bench.slow_clients import HOST, ROOT, serve
from bench.web import processes
from project.redis_server import free_port

USERNAME, PASSWORD = "boss", "correct horse battery staple"
CREATE_USER = (
    "from django.contrib.auth import get_user_model;"
    "from rest_framework.authtoken.models import Token;"
    f"user = get_user_model().objects.create_superuser({USERNAME!r}, 'boss@example.com', {PASSWORD!r});"
    "print(Token.objects.create(user=user).key)"
)


@dataclass(frozen=True)
class Site:
    port: int
    token: str
    server_pid: int  # granian's main process; the workers are its children

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def worker_threads(self) -> int:
        """The threads of the server's worker processes (its children), from ``/proc`` (Linux)."""
        workers = [entry for entry, fields in processes() if int(fields[1]) == self.server_pid]
        return sum(len(list((worker / "task").iterdir())) for worker in workers)


@contextmanager
def served_site(tmp: Path, env: dict[str, str] | None = None) -> Iterator[Site]:
    """One worker serving a fresh SQLite file, against this run's Redis and key prefix, with the static
    files collected first (whitenoise indexes them as the server starts), as ``make run`` does."""
    static = [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"]
    subprocess.run(static, cwd=ROOT, check=True)
    port = free_port()
    server = serve(tmp, os.environ["REDIS_URL"], port, {"WEB_CONCURRENCY": "1", **(env or {})})
    try:
        made = subprocess.run(
            [sys.executable, "manage.py", "shell", "-v0", "-c", CREATE_USER],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}"},
            capture_output=True,
            text=True,
            check=True,
        )
        yield Site(port, made.stdout.split()[-1], server.pid)
    finally:
        stopped = end(server)  # SIGTERM, then whatever of its group is left: nothing outlives the test
    assert stopped is not None, "granian did not stop within 30 s of SIGTERM"
