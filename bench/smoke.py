"""Every benchmark at its smoke size (seconds; a minute or so for those that start servers), so that
a bench that no longer runs fails CI (``.ci/run``, ``make bench-smoke``) rather than rotting until
someone needs its figures.

Each bench runs as ``python -m bench.<name>`` with the arguments of ``SMOKE``, in a process of its
own, writing its results into a temporary directory (``BENCH_RESULTS``): the committed
``bench/results/`` stay the full runs the docs quote. A module of ``bench/`` that runs as a script
and has no entry here fails the run, so a new bench comes with its smoke size. A bench whose tool
is missing (``wrk``; PostgreSQL for ``bench.flush``) is skipped with the reason printed.

    python -m bench.smoke             # every bench
    python -m bench.smoke http flush  # these
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from bench import harness

# Arguments that make each bench run in seconds, and the environment it needs beside them.
SMOKE: dict[str, tuple[list[str], dict[str, str]]] = {
    "bots": (["--rounds", "1", "--repeat", "20"], {}),
    "call_cost": (["--smoke"], {}),
    "capacity": (["--smoke"], {}),
    # The suite's three faults and the retrying clients (tests/test_chaos.py runs the three alone).
    "chaos": (["--only", "redis-sigkill,granian-hup,celery-sigkill,redis-stall-retries", "--sqlite"], {}),
    "cluster_wave": (["--rounds", "1", "--pipelines", "10"], {}),
    "first_visits": (["--visitors", "2000"], {}),
    "flush": (["--smoke"], {}),
    "funnels": (["--users", "2000", "--rounds", "2"], {}),
    "gc_pauses": (["--seconds", "1", "--rounds", "1", "--connections", "4"], {}),
    "groups": (["--quick", "--rounds", "1"], {}),
    "http": (["--seconds", "1", "--rounds", "1", "--connections", "4"], {}),
    "junk_paths": (["--paths", "1000", "--lengths", "20", "200"], {}),
    "layout_memory": (["--users", "2000"], {}),
    "last_seen": (["--events", "2000", "--users", "500", "--writers", "2", "--updates", "200", "--rounds", "1"], {}),
    "live": (["--streams", "100", "--rounds", "1", "--seconds", "1", "--connections", "4"], {}),
    "membership": (["--ids", "5000"], {}),
    "reports": (["--users", "500", "--readers", "4", "--seconds", "0.5"], {}),
    # The bench waits a session window for the seed's session lists to expire: 5 s, not 60.
    "reports_scale": (["--viewers", "20000", "--seconds", "1", "--workers", "1"], {"ACTIVITY_SESSION_WINDOW": "5"}),
    "redis_instructions": (["--smoke"], {}),
    # Without callgrind's instruction counts: Django under valgrind takes a minute a case.
    "request_cpu": (["--requests", "20", "--rounds", "1", "--counted", "0"], {}),
    "retention": (["--users", "20000", "--rounds", "3"], {}),
    "servers": (["--rounds", "1", "--seconds", "1", "--connections", "4", "--probes", "1"], {}),
    "slow_clients": (["--seconds", "3", "--sockets", "8"], {}),
    "transitions": (["--users", "100", "--pages", "20", "--views", "200", "--batch", "100", "--rounds", "1"], {}),
}
# The program a bench needs beside Python's and Redis's (Debian's package of the same name).
NEEDS = {
    "call_cost": "valgrind",
    "gc_pauses": "wrk",
    "http": "wrk",
    "live": "wrk",
    "servers": "wrk",
    "redis_instructions": "valgrind",
}


def benches() -> list[str]:
    """The modules of bench/ that run as scripts (this runner aside)."""
    here = Path(__file__).resolve().parent
    return sorted(
        path.stem
        for path in here.glob("*.py")
        if path.stem != "smoke" and 'if __name__ == "__main__":' in path.read_text()
    )


def postgres(stack: ExitStack) -> str | None:
    """``bench.flush``'s PostgreSQL: ``BENCH_PG`` or the local one when it answers, else a private one
    where PostgreSQL is installed; None (with the reason printed by the caller) when neither."""
    url = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
    if shutil.which("pg_isready") and subprocess.run(["pg_isready", "-q", "-d", url]).returncode == 0:
        return url
    if not harness.PrivatePostgres.available():
        return None
    server = harness.PrivatePostgres().start()
    stack.callback(server.stop)
    return f"postgres://postgres@127.0.0.1:{server.port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="benches to run (default: every one)")
    names = parser.parse_args().names or benches()
    unknown = [name for name in names if name not in SMOKE]
    if unknown:
        sys.exit(f"no smoke size for bench {', '.join(unknown)}: add it to bench.smoke.SMOKE")
    failed: list[str] = []
    skipped: list[str] = []
    started = time.monotonic()
    with ExitStack() as stack:
        out = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="activity-bench-smoke-")))
        env = {**os.environ, "BENCH_RESULTS": str(out)}
        for name in names:
            args, extra = SMOKE[name]
            if name in NEEDS and not shutil.which(NEEDS[name]):
                print(f"{name}: skipped, {NEEDS[name]} is missing (apt-get install {NEEDS[name]})", flush=True)
                skipped.append(name)
                continue
            if name == "flush":
                url = postgres(stack)
                if url is None:
                    print(f"{name}: skipped, no PostgreSQL answers and none is installed", flush=True)
                    skipped.append(name)
                    continue
                extra = {**extra, "BENCH_PG": url}
            command = [sys.executable, "-m", f"bench.{name}", *args]
            log = out / f"{name}.log"
            begun = time.monotonic()
            with log.open("w") as output:
                code = subprocess.run(command, env={**env, **extra}, stdout=output, stderr=subprocess.STDOUT).returncode
            outcome = "ok" if code == 0 else f"FAILED (exit {code})"
            print(f"{name}: {outcome} in {time.monotonic() - begun:.0f} s: {' '.join(command[1:])}", flush=True)
            if code:
                failed.append(name)
                print(log.read_text()[-4000:], flush=True)
    ran = len(names) - len(skipped)
    print(f"{ran - len(failed)} of {ran} benches ran ({len(skipped)} skipped) in {time.monotonic() - started:.0f} s")
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
