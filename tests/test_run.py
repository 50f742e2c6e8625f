"""``make run``'s runner (``python -m project.run``), started for real: a child that exits is started again
while the others keep serving, the children go when the runner is killed, a port already served
is refused, granian starts as many workers as the machine has CPUs without a warning, and commands
in a second terminal use the private Redis the runner started. The runner uses this run's Redis and
key prefix (but in that last test), and a database of its own."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings

from project.redis_server import free_port
from project.serving import default_workers
from tests.celery_procs import wait_for

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.celery


class Runner:
    """``python project/run.py`` in a process group of its own, its output in a file; from the
    checkout at ``root``, with ``env`` over this process's environment."""

    def __init__(self, tmp: Path, port: int, root: Path = ROOT, env: dict[str, str] | None = None) -> None:
        self.port, self.log = port, tmp / "run.log"
        env = {
            **os.environ,
            **(env or {}),
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
                cwd=root,
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


def wait_until_serving(started: Runner) -> None:
    try:
        wait_for(started.healthy, timeout=90, what="make run to serve")
        wait_for(lambda: "ready" in started.output(), timeout=30, what="the Celery worker")
    except AssertionError as error:
        raise AssertionError(f"{error}; its output:\n{started.output()[-3000:]}") from None


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    started = Runner(tmp_path, free_port())
    try:
        wait_until_serving(started)
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
    # Every worker of the new server up: granian stopped while a worker is still starting waits out
    # its kill timeout (serving.WORKERS_KILL_TIMEOUT), which would be the teardown's.
    wait_for(lambda: runner.output().count("Started worker-") == 2 * default_workers(), timeout=30, what="granian")
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


def test_the_web_server_starts_a_worker_per_cpu_without_a_warning(runner):
    workers = default_workers()
    assert workers <= os.cpu_count()  # granian warns when the workers outnumber the machine's CPUs
    output = runner.output()
    assert f"Spawning worker-{workers} " in output and f"Spawning worker-{workers + 1} " not in output
    assert "[WARNING]" not in output, output


def a_checkout(tmp: Path) -> Path:
    """A checkout of the example project of its own (its ``var/``, where make run keeps its private
    Redis's data and URL): ``project/`` and ``manage.py`` copied, the rest linked."""
    root = tmp / "checkout"
    shutil.copytree(ROOT / "project", root / "project", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "manage.py", root)
    for name in ("activity", "lua", "jobs"):
        (root / name).symlink_to(ROOT / name)
    return root


def test_commands_in_a_second_terminal_use_the_redis_make_run_started(tmp_path):
    """With nothing answering at REDIS_URL the runner starts a private redis-server; a command run
    beside it without REDIS_URL (the README's second terminal) finds that server, writes into it,
    and once the runner has stopped, no longer names it."""
    root = a_checkout(tmp_path)
    nothing = f"redis://127.0.0.1:{free_port()}/0"
    standalone = {"ACTIVITY_REDIS_CLUSTER": "0"}  # the server make run starts is one redis-server, on any pass
    started = Runner(tmp_path, free_port(), root, {"REDIS_URL": nothing, **standalone})
    second_terminal = {name: value for name, value in os.environ.items() if name != "REDIS_URL"} | standalone
    second_terminal["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"

    def manage(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=root, env=second_terminal, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    def named() -> str:  # the Redis a command would use (shell runs no system check: nothing connects)
        return manage(
            "shell", "--no-imports", "-c", "from activity import conf; print(conf.get('REDIS_URL'))"
        ).stdout.strip()

    try:
        wait_until_serving(started)
        private = re.search(r"started a private redis-server \(.+?\) at (\S+);", started.output()).group(1)
        assert private != nothing and named() == private
        demo = manage("activity_demo", "--users", "3", "--days", "1")
        assert "activity.W003" not in demo.stdout + demo.stderr  # nothing said about a Redis that does not answer
        with redis.Redis.from_url(private) as client:
            assert any(client.scan_iter(match=f"{os.environ['ACTIVITY_KEY_PREFIX']}*", count=1000))
    finally:
        started.stop()
    assert not (root / "var" / "redis.url").exists()
    assert named() == "redis://127.0.0.1:6379/0"  # the default again
