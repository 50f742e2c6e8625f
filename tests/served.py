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

from bench.slow_clients import HOST, ROOT, serve
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

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"


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
        yield Site(port, made.stdout.split()[-1])
    finally:
        server.terminate()
        server.wait(timeout=30)
