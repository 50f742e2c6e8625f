"""``make run``: the web server, a Celery worker and Celery beat in one terminal; Ctrl-C stops all.

The web server is gunicorn (``project/gunicorn.conf.py``) behind a ``collectstatic``, so whitenoise
serves the static files with DEBUG off. ``--dev`` (``make dev``) runs Django's development server
instead, with autoreload and DEBUG on unless the environment says otherwise.
When nothing answers at ``REDIS_URL`` a private redis-server is started for the session. With
``ACTIVITY_REDIS_CLUSTER=1`` and no ``CELERY_BROKER_URL`` (Celery cannot use a Redis Cluster), a
private standalone redis-server is started for Celery's broker and results.

Each process runs in its own process group, so that what it leaves behind (the autoreloader's server,
a straggling child) is found and stopped too: nothing outlives the session. Ctrl-C, SIGTERM and
SIGHUP all stop the whole set.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from project.redis_server import PrivateRedis, answers

ROOT = Path(__file__).resolve().parent.parent


def web_command(python: str, dev: bool, host: str, port: str) -> list[str]:
    if dev:
        return [python, "manage.py", "runserver", f"{host}:{port}", "--insecure"]
    return [python, "-m", "gunicorn", "-c", str(ROOT / "project" / "gunicorn.conf.py")]


def signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group is gone already
        os.killpg(process.pid, signum)


def stop(processes: dict[str, subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each process we started (graceful: gunicorn and Celery finish their requests and
    tasks, then stop their own children), then SIGKILL to whatever is left of its process group
    once it is gone or 15 s later (the autoreloader's server, a straggling child)."""
    for process in processes.values():
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes.values():
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
    if dev:
        env.setdefault("DEBUG", "1")
    url = env.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    private = None
    cluster = env.get("ACTIVITY_REDIS_CLUSTER", "").strip().lower() in {"1", "true", "yes", "on"}
    if cluster and not env.get("CELERY_BROKER_URL"):
        private = PrivateRedis().start()
        env["CELERY_BROKER_URL"] = private.url
        env.setdefault("CELERY_RESULT_BACKEND", private.url)
        print(f"Redis Cluster at {url}: started a private redis-server for Celery's broker at {private.url}")
    elif not answers(url):
        private = PrivateRedis().start()
        env["REDIS_URL"] = private.url
        print(f"Nothing answers at {url}: started a private redis-server ({private.binary}) at {private.url}")
    (ROOT / "var").mkdir(exist_ok=True)
    # Every process counts its metrics into one directory, so /metrics sums web and Celery workers.
    metrics_dir = ROOT / "var" / "prometheus"
    shutil.rmtree(metrics_dir, ignore_errors=True)  # the counts of a previous run are not this one's
    metrics_dir.mkdir()
    env.setdefault("PROMETHEUS_MULTIPROC_DIR", str(metrics_dir))
    python = sys.executable
    processes: dict[str, subprocess.Popen[bytes]] = {}
    # The children are in process groups of their own: the terminal's signals reach only this process,
    # which stops them. SIGINT even when started in the background (a shell then ignores it for us),
    # SIGHUP unless ignored on purpose (nohup).
    signal.signal(signal.SIGINT, interrupted)
    signal.signal(signal.SIGTERM, interrupted)
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, interrupted)
    status = 0
    try:
        subprocess.run([python, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True)
        if not dev:
            subprocess.run([python, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
        host, port = env.get("HOST", "127.0.0.1"), env.get("PORT", "8000")
        commands = {
            "web": web_command(python, dev, host, port),
            "worker": [python, "-m", "celery", "-A", "project", "worker", "-l", "info", "--concurrency", "2"],
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "project",
                "beat",
                "-l",
                "info",
                "-s",
                str(ROOT / "var" / "beat-schedule"),
            ],
        }
        for name, cmd in commands.items():
            processes[name] = subprocess.Popen(cmd, cwd=ROOT, env=env, process_group=0)
        server = "Django's development server (autoreload)" if dev else "gunicorn"
        print(
            f"Serving http://{host}:{port}/ with {server} (API at /api/v1/, docs at /api/v1/docs/). "
            "Ctrl-C stops everything."
        )
        while all(p.poll() is None for p in processes.values()):
            time.sleep(0.5)
        status = next(p.returncode for p in processes.values() if p.poll() is not None) or 1
    except KeyboardInterrupt:
        pass
    finally:
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # a second Ctrl-C must not cut the clean-up short
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        stop(processes)
        if private:
            private.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
