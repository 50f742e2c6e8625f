"""``make run``: the web server, a Celery worker and Celery beat in one terminal; Ctrl-C stops all.

The web server is granian (``project/serving.py``) behind a ``collectstatic``, so whitenoise serves
the static files with DEBUG off. ``--dev`` (``make dev``) runs Django's development server
instead, with autoreload and DEBUG on unless the environment says otherwise.
When nothing answers at ``REDIS_URL`` a private redis-server is started for the session (a Sentinel
URL, ``redis+sentinel://``, is used as it is), and its URL kept in ``var/redis.url`` until the session
ends: ``project/settings.py`` reads it when ``REDIS_URL`` is unset, so ``manage.py`` commands run in
another terminal use that server too. With
``ACTIVITY_REDIS_CLUSTER=1`` and no ``CELERY_BROKER_URL`` (Celery cannot use a Redis Cluster), a
private standalone redis-server is started for Celery's broker and results.

Each process runs in its own process group, so that what it leaves behind (the autoreloader's server,
a straggling child) is found and stopped too: nothing outlives the session. Ctrl-C, SIGTERM and
SIGHUP all stop the whole set; on Linux the children get SIGTERM too if the runner itself is killed.
A child that exits is started again, with a line saying so, while the others keep serving: after
1 s, doubling while it keeps exiting soon after its start, up to 30 s. A port something already
answers on is refused before anything starts.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from activity.conf import SENTINEL_SCHEME, redacted
from project.redis_server import PrivateRedis, answers
from project.serving import granian_command
from project.settings import MAKE_RUN_REDIS_URL_FILE

ROOT = Path(__file__).resolve().parent.parent
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def web_command(python: str, dev: bool, env: dict[str, str]) -> list[str]:
    if dev:
        return [
            python,
            "manage.py",
            "runserver",
            f"{env.get('HOST', '127.0.0.1')}:{env.get('PORT', '8000')}",
            "--insecure",
        ]
    return granian_command(python, env)


def welcome(server: str, env: dict[str, str]) -> str:
    """What to open, what it runs on, and how to get in: printed once everything has started."""
    site = f"http://{env.get('HOST', '127.0.0.1')}:{env.get('PORT', '8000')}"
    python = Path(sys.executable)
    if python.is_relative_to(ROOT):
        python = python.relative_to(ROOT)
    database = env.get("DATABASE_URL") or f"sqlite:///{ROOT / 'var' / 'db.sqlite3'}"
    return "\n".join(
        [
            f"Serving {site}/ with {server}. Ctrl-C stops everything.",
            f"  {site}/                the dashboard (sign in as a superuser)",
            f"  {site}/api/v1/docs/    the API and its documentation",
            f"  {site}/healthz         health",
            f"Redis {redacted(env['REDIS_URL'])}, key prefix {env.get('ACTIVITY_KEY_PREFIX', 'act:')}; "
            f"database {redacted(database)}",
            "A superuser, then an API token for them:",
            f"  {python} manage.py createsuperuser",
            f"  {python} manage.py drf_create_token <username>",
        ]
    )


def terminate_with_parent() -> None:
    """In a child before it runs its command: SIGTERM when the runner dies, however it dies (Linux's
    PR_SET_PDEATHSIG; elsewhere a runner killed with SIGKILL leaves its children running)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def what_answers(host: str, port: str) -> str | None:
    """What already answers on ``host:port`` (an HTTP server's ``Server`` header and status, or just
    that something accepts connections), None when nothing does."""
    with socket.socket() as probe:
        probe.settimeout(1)
        if probe.connect_ex((host, int(port))) != 0:
            return None
    connection = http.client.HTTPConnection(host, int(port), timeout=2)
    try:
        connection.request("HEAD", "/")
        answer = connection.getresponse()
        return f"an HTTP server ({answer.getheader('Server') or 'unnamed'}, {answer.status} for /)"
    except (OSError, http.client.HTTPException):
        return "something that accepts connections but does not answer HTTP"
    finally:
        connection.close()


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(process.pid, signum)


# Seconds before a child that exited is started again: the first figure, doubling at each exit that
# follows a short run, up to the second. A child that ran STEADY_SECONDS starts from the first again.
RESTART_DELAYS = (1.0, 30.0)
STEADY_SECONDS = 60.0


class Child:
    """One process the runner keeps up: started in a process group of its own, restarted when it
    exits, with a growing delay while it keeps exiting soon after its start."""

    def __init__(self, name: str, command: list[str], env: dict[str, str]) -> None:
        self.name, self.command, self.env = name, command, env
        self.process: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.delay = RESTART_DELAYS[0]
        self.restart_at: float | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.command, cwd=ROOT, env=self.env, process_group=0, preexec_fn=terminate_with_parent
        )
        self.started, self.restart_at = time.monotonic(), None
        print(f"[run] {self.name} started (pid {self.process.pid})", flush=True)

    def watch(self) -> None:
        """Restart the process once its delay has passed since it exited."""
        assert self.process is not None
        now = time.monotonic()
        if self.restart_at is None and self.process.poll() is not None:
            signal_group(self.process, signal.SIGKILL)  # whatever it left behind in its group
            ran = now - self.started
            if ran >= STEADY_SECONDS:
                self.delay = RESTART_DELAYS[0]
            print(
                f"[run] {self.name} exited with status {self.process.returncode} after {ran:.0f} s; "
                f"starting it again in {self.delay:g} s",
                flush=True,
            )
            self.restart_at = now + self.delay
            self.delay = min(2 * self.delay, RESTART_DELAYS[1])
        elif self.restart_at is not None and now >= self.restart_at:
            self.start()


def stop(children: list[Child]) -> None:
    """SIGTERM to each process we started (graceful: the web server and Celery finish their requests
    and tasks, then stop their own children), then SIGKILL to whatever is left of its process group
    once it is gone or 15 s later (the autoreloader's server, a straggling child)."""
    processes = [child.process for child in children if child.process is not None]
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=15)
        signal_group(process, signal.SIGKILL)
        process.wait()


def interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev", action="store_true", help="Django's development server, autoreload, DEBUG on")
    dev = parser.parse_args().dev
    env = dict(os.environ)
    host, port = env.get("HOST", "127.0.0.1"), env.get("PORT", "8000")
    found = what_answers(host, port)
    if found is not None:
        print(
            f"{host}:{port} is already served, by {found}: an earlier make run? Stop it, or choose another PORT.",
            file=sys.stderr,
        )
        return 1
    if dev:
        env.setdefault("DEBUG", "1")
    url = env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    private = None
    cluster = env.get("ACTIVITY_REDIS_CLUSTER", "").strip().lower() in {"1", "true", "yes", "on"}
    if cluster and not env.get("CELERY_BROKER_URL"):
        private = PrivateRedis().start()
        env["CELERY_BROKER_URL"] = private.url
        env.setdefault("CELERY_RESULT_BACKEND", private.url)
        print(f"Redis Cluster at {url}: started a private redis-server for Celery's broker at {private.url}")
    elif not url.startswith(f"{SENTINEL_SCHEME}://") and not answers(url):
        private = PrivateRedis(data_dir=ROOT / "var" / "redis").start()  # persists: AOF everysec and RDB
        env["REDIS_URL"] = private.url
        MAKE_RUN_REDIS_URL_FILE.write_text(private.url + "\n")
        print(
            f"Nothing answers at {url}: started a private redis-server ({private.binary}) at {private.url}; "
            f"manage.py commands in another terminal use it too while this runs ({MAKE_RUN_REDIS_URL_FILE})"
        )
    (ROOT / "var").mkdir(exist_ok=True)
    # Every process counts its metrics into one directory, so /metrics sums web and Celery workers.
    metrics_dir = Path(env.get("PROMETHEUS_MULTIPROC_DIR") or ROOT / "var" / "prometheus")
    metrics_dir.mkdir(parents=True, exist_ok=True)
    for counts in metrics_dir.glob("*.db"):  # a previous run's counts are not this one's
        counts.unlink()
    env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    python = sys.executable
    children: list[Child] = []
    # The children are in process groups of their own: the terminal's signals reach only this process,
    # which stops them. SIGINT even when started in the background (a shell then ignores it for us),
    # SIGHUP unless ignored on purpose (nohup).
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, interrupted)
    try:
        subprocess.run([python, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True)
        if not dev:
            subprocess.run([python, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
        commands = {
            "web": web_command(python, dev, env),
            "worker": [python, "-m", "celery", "-A", "project", "worker", "-l", "info", "--concurrency", "2"],
            "beat": [python, "-m", "celery", "-A", "project", "beat", "-l", "info"],
        }
        children.extend(Child(name, command, env) for name, command in commands.items())
        for child in children:
            child.start()
        server = "Django's development server (autoreload)" if dev else "granian"
        print(welcome(server, env), flush=True)
        while True:
            time.sleep(0.5)
            for child in children:
                child.watch()
    except KeyboardInterrupt:
        pass
    finally:
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # a second Ctrl-C must not cut the clean-up short
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        stop(children)
        if private:
            if private.persistent:  # the store's server (not a Cluster's broker): its URL is in the file
                MAKE_RUN_REDIS_URL_FILE.unlink(missing_ok=True)  # first: no command is sent to it as it goes
            private.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
