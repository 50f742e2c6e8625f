"""The test run's own Redis (``tests/redis_plugin.py``) is stopped however the run ends: the plugin
starts it before pytest has read every option, so a run that stops at a usage error must stop it too,
or each mistyped option leaves a redis-server behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def redis_servers_under(directory: Path) -> list[int]:
    """Pids of the live redis-server processes whose working directory is under ``directory`` (a
    private server works in its data directory, a temporary one under ``TMPDIR``)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            status = (proc / "status").read_text()
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        alive = fields.get("Name") == "redis-server" and not fields.get("State", "").startswith("Z")
        if alive and cwd.startswith(str(directory)):
            found.append(int(proc.name))
    return found


def test_a_run_stopped_by_a_usage_error_leaves_no_redis_server(tmp_path):
    env = {name: value for name, value in os.environ.items() if name != "TEST_REDIS_URL"}  # its own server
    env["TMPDIR"] = str(tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--no-such-option", "tests/test_redis_plugin.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=30,  # a server left behind holds the pipes open: the run then never seems to end
    )
    assert run.returncode == 4, run.stderr  # pytest's usage error
    assert b"--no-such-option" in run.stderr
    assert redis_servers_under(tmp_path) == []
