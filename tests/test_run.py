"""``make run``'s runner (``python -m project.run``), started for real: a child that exits is started again
while the others keep serving, the children go when the runner is killed, and a port already served
is refused. The runner uses this run's Redis and key prefix, and a database of its own."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from project.redis_server import free_port
from tests.celery_procs import wait_for

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.celery


class Runner:
    """``python project/run.py`` in a process group of its own, its output in a file."""

    def __init__(self, tmp: Path, port: int) -> None:
        self.port, self.log = port, tmp / "run.log"
        env = {
            **os.environ,
            "PORT": str(port),
            "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "CELERY_RESULT_BACKEND": settings.CELERY_RESULT_BACKEND,
            "CELERY_BEAT_SCHEDULE_FILENAME": str(tmp / "beat-schedule"),
            "PROMETHEUS_MULTIPROC_DIR": str(tmp / "prometheus"),
            "PYTHONUNBUFFERED": "1",
        }
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "project.run"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def pids(self, name: str) -> list[int]:
        """The pids the runner said it started ``name`` with, in order."""
        return [int(pid) for pid in re.findall(rf"\[run\] {name} started \(pid (\d+)\)", self.output())]

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1) as answer:
                return answer.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        """Stop the runner, then whatever of its children's process groups is left (a failed test)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        for pid in self.pids("web") + self.pids("worker") + self.pids("beat"):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    started = Runner(tmp_path, free_port())
    try:
        try:
            wait_for(started.healthy, timeout=90, what="make run to serve")
            wait_for(lambda: "ready" in started.output(), timeout=30, what="the Celery worker")
        except AssertionError as error:
            raise AssertionError(f"{error}; its output:\n{started.output()[-3000:]}") from None
        yield started
    finally:
        started.stop()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_child_that_exits_is_started_again_and_the_site_keeps_answering(runner):
    worker = runner.pids("worker")[-1]
    os.killpg(worker, signal.SIGKILL)  # the worker and its pool
    deadline = time.monotonic() + 10
    answered = []
    while len(runner.pids("worker")) < 2:
        assert time.monotonic() < deadline, runner.output()[-3000:]
        answered.append(runner.healthy())
        time.sleep(0.1)
    assert answered and all(answered)  # the web server kept answering meanwhile
    assert "[run] worker exited with status -9" in runner.output()
    assert runner.process.poll() is None

    web = runner.pids("web")[-1]
    os.killpg(web, signal.SIGKILL)
    wait_for(lambda: len(runner.pids("web")) == 2, timeout=10, what="the web server started again")
    wait_for(runner.healthy, timeout=60, what="the web server answering again")
    assert "[run] web exited with status -9" in runner.output()
    assert all(alive(pid) for pid in (runner.pids("worker")[-1], runner.pids("beat")[-1]))


def test_the_children_stop_when_the_runner_is_killed(runner):
    children = [runner.pids(name)[-1] for name in ("web", "worker", "beat")]
    os.kill(runner.process.pid, signal.SIGKILL)
    runner.process.wait()
    wait_for(lambda: not any(alive(pid) for pid in children), timeout=30, what="the children to stop")
    assert not runner.healthy()


def test_a_port_already_served_is_refused(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        refused = Runner(tmp_path, taken.getsockname()[1])
        assert refused.process.wait(timeout=30) == 1
    assert "is already served, by something that accepts connections but does not answer HTTP" in refused.output()
