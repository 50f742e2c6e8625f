"""``make run``: the web server, a Celery worker and Celery beat in one terminal; Ctrl-C stops all.

When nothing answers at ``REDIS_URL`` a private redis-server is started for the session.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from project.redis_server import PrivateRedis, answers

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    env = dict(os.environ)
    url = env.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    private = None
    if not answers(url):
        private = PrivateRedis().start()
        env["REDIS_URL"] = private.url
        print(f"Nothing answers at {url}: started a private redis-server ({private.binary}) at {private.url}")
    (ROOT / "var").mkdir(exist_ok=True)
    python = sys.executable
    subprocess.run([python, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True)
    host, port = env.get("HOST", "127.0.0.1"), env.get("PORT", "8000")
    commands = {
        "web": [python, "manage.py", "runserver", f"{host}:{port}", "--noreload", "--insecure"],
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
    processes = {name: subprocess.Popen(cmd, cwd=ROOT, env=env) for name, cmd in commands.items()}
    print(f"Serving http://{host}:{port}/ (API at /api/v1/, docs at /api/v1/docs/). Ctrl-C stops everything.")
    status = 0
    try:
        while all(p.poll() is None for p in processes.values()):
            time.sleep(0.5)
        status = next(p.returncode for p in processes.values() if p.poll() is not None) or 1
    except KeyboardInterrupt:
        pass
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        if private:
            private.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
