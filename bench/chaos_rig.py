"""The chaos run's processes (``bench.chaos``): granian, the store's and the broker's Redis, a
Celery worker and beat, the reader (``Probe``) and an optional private PostgreSQL, started and
stopped together as one ``Rig``. Apart from the faults and the phases, which only drive it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from bench.chaos_probe import Probe
from bench.harness import PrivatePostgres, end
from bench.slow_clients import serve
from project.redis_server import PrivateRedis, answers, free_port

ROOT = Path(__file__).resolve().parent.parent
DRAIN = 40.0  # seconds the flush may take to empty its queue after a phase
# Seconds between flushes (production: 10; the flush's lock lives 0.8 of it): short, so phases are
# short, yet long beside Celery's own fixed delays (a worker starts in 2-3 s; a pool process that
# a time limit killed is replaced at the pool's next 5 s maintenance), as 10 s is.
FLUSH_INTERVAL = 5
POLL = 0.25  # seconds between looks at the flush queue and the database after a fault


class Rig:
    """Every process of the run, started by ``start()`` and all stopped by ``stop()``."""

    def __init__(
        self, tmp: Path, lifetime: int | None = None, database_url: str | None = None, postgres: bool = False
    ) -> None:
        self.tmp = tmp
        self.postgres = PrivatePostgres() if postgres else None
        self.database_url = self.postgres.url if self.postgres else database_url or f"sqlite:///{tmp / 'db.sqlite3'}"
        self.store = PrivateRedis(data_dir=tmp / "redis", args=["--enable-debug-command", "local"])
        self.broker = PrivateRedis()
        self.port = free_port()
        self.lifetime = lifetime
        self.web: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.beat: subprocess.Popen[bytes] | None = None
        self.probe: Probe | None = None
        self.workers_started = 0

    @property
    def env(self) -> dict[str, str]:
        env = {
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.store.url,
            "ACTIVITY_REDIS_CLUSTER": "",  # the rig's store is a standalone server, whatever runs it
            "CELERY_BROKER_URL": self.broker.url,
            "CELERY_RESULT_BACKEND": self.broker.url,
            "ACTIVITY_FLUSH_INTERVAL": str(FLUSH_INTERVAL),
            "WEB_CONCURRENCY": "2",
            "ACTIVITY_TEST_PAUSE_AFTER_CLAIM": "1",
            "ACTIVITY_TEST_PAUSE_SECONDS": "0.3",
        }
        if self.lifetime:
            env["GRANIAN_WORKERS_LIFETIME"] = str(self.lifetime)
        return env

    def start(self) -> Rig:
        if self.postgres is not None:
            self.postgres.start()
        self.store.start()
        self.broker.start()
        self.web = serve(self.tmp, self.store.url, self.port, self.env)  # migrates, then serves
        self.probe = Probe({**os.environ, **self.env})
        self.start_worker()
        self.beat = self._celery("beat", ["beat", "-l", "info", "-s", str(self.tmp / "beat-schedule")])
        return self

    def _celery(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with (self.tmp / f"{name}.log").open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "tests.celery_app", *args],
                cwd=ROOT,
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
            )

    def start_worker(self) -> None:
        self.workers_started += 1
        name = f"worker{self.workers_started}"
        args = ["worker", "--pool=prefork", "-c", "1", "-n", f"{name}@%h", "-l", "info", "--without-gossip"]
        self.worker = self._celery(name, [*args, "--without-mingle", "--without-heartbeat"])

    def worker_log(self) -> str:
        return (self.tmp / f"worker{self.workers_started}.log").read_text(errors="replace")

    def web_log(self) -> str:
        return (self.tmp / "granian.log").read_text(errors="replace")

    def wait_store(self, timeout: float = 30) -> float:
        """Block until the store answers (its data loaded); the time it did."""
        deadline = time.monotonic() + timeout
        while not answers(self.store.url, timeout=0.2):
            if time.monotonic() > deadline:
                raise RuntimeError("the store did not come back")
            time.sleep(0.02)
        return time.time()

    def drain(self, each: Callable[[], None]) -> float:
        """Wait until the flush has written every change (its queue empty), calling ``each`` at every
        look; seconds it took."""
        assert self.probe is not None
        started = time.monotonic()
        while True:
            each()
            with contextlib.suppress(RuntimeError):  # the store or database still away
                if self.probe.ask("status")["backlog"] == 0:
                    return time.monotonic() - started
            if time.monotonic() - started > DRAIN:
                raise RuntimeError(f"the flush did not drain in {DRAIN:g} s; see {self.tmp}/worker*.log")
            time.sleep(POLL)

    def stop(self) -> None:
        for process in (self.beat, self.worker):
            end(process, wait=10)
        if self.probe is not None:
            self.probe.stop()
        end(self.web)
        self.broker.stop()
        self.store.stop()
        if self.postgres is not None:
            self.postgres.stop()


@contextlib.contextmanager
def rig(lifetime: int | None = None, database_url: str | None = None, postgres: bool = False) -> Iterator[Rig]:
    """A started rig in a temporary directory (SQLite there unless ``database_url``, or a private
    PostgreSQL), stopped at exit, whatever happened."""
    with tempfile.TemporaryDirectory(prefix="activity-chaos-") as name:
        running = Rig(Path(name), lifetime, database_url, postgres)
        try:
            yield running.start()
        finally:
            running.stop()
