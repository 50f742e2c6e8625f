"""Real Celery processes for the tests about Celery: workers (and beat) on this run's private Redis
and queue, pointed at the database the test runs on, each in its own process group so SIGKILL
takes its pool children too."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
LOCK_TTL = 5  # seconds: short, so the runs after a kill can start soon
BATCH = 2000


def worker_database_url() -> str:
    """DATABASE_URL of the database this test runs on (pytest-django's test database), for workers."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    credentials = quote(db["USER"] or "") + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{quote(db['NAME'])}"


class Proc:
    """A Celery subprocess in its own process group, so SIGKILL takes its pool children too."""

    def __init__(self, name: str, args: list[str], tmp_path: Path, **env: str) -> None:
        environment = dict(os.environ)
        constants = {"activity.services.locks.JOB_LOCK_TTL": LOCK_TTL, "activity.services.flush.BATCH": BATCH}
        constants.update(json.loads(env.pop("ACTIVITY_TEST_CONSTANTS", "{}")))
        environment.update(DATABASE_URL=worker_database_url(), ACTIVITY_TEST_CONSTANTS=json.dumps(constants))
        environment.update(env)
        self.log = tmp_path / f"{name}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "tests.celery_app", *args],
                cwd=ROOT,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def __enter__(self) -> Proc:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.kill()  # whether the test passed or not: no process outlives its test


def worker(name: str, tmp_path: Path, queue: str | None = None, **env: str) -> Proc:
    """A worker taking tasks from ``queue`` (by default the run's own queue)."""
    queue = queue or settings.CELERY_TASK_DEFAULT_QUEUE
    args = ["worker", "--pool=prefork", "-c", "1", "-Q", queue, "-n", f"{name}@%h", "-l", "info", "--without-gossip"]
    return Proc(name, [*args, "--without-mingle", "--without-heartbeat"], tmp_path, **env)


def beat(name: str, tmp_path: Path, **env: str) -> Proc:
    return Proc(name, ["beat", "-l", "info", "-s", str(tmp_path / f"{name}-schedule")], tmp_path, **env)


def wait_for(condition, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
