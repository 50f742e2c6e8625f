"""What every benchmark shares: a private Redis, Django set up against it, and the results file; and
for the benches that run processes (``bench.chaos``), a private PostgreSQL and ways to stop and watch them."""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import platform
import pwd
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from project.redis_server import PrivateRedis, free_port

# The committed results, which the docs include, and where this run writes its own: elsewhere when
# BENCH_RESULTS names a directory (bench.smoke's, so a smoke run leaves the committed files alone).
COMMITTED = Path(__file__).resolve().parent / "results"
RESULTS = Path(os.environ.get("BENCH_RESULTS") or COMMITTED)


def start(prefix: str = "bench:") -> PrivateRedis:
    """Start a private redis-server and point Django (settings, store client) at it, with a database:
    ``DATABASE_URL``'s, else a migrated SQLite file of the run's own (the write path reads the
    funnels' definitions there), removed at exit."""
    server = PrivateRedis().start()
    os.environ["REDIS_URL"] = server.url
    os.environ["ACTIVITY_KEY_PREFIX"] = prefix
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    own_database = "DATABASE_URL" not in os.environ
    if own_database:
        folder = tempfile.mkdtemp(prefix="bench-db-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        os.environ["DATABASE_URL"] = f"sqlite:///{folder}/db.sqlite3"
    import django

    django.setup()
    if own_database:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
    return server


def timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def percentile(samples: list[float], q: float) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[int(q) - 1] if len(samples) > 1 else samples[0]


def write(name: str, results: dict[str, Any], table: list[list[str]], notes: str = "") -> None:
    """Write bench/results/<name>.json and a Markdown table <name>.md that docs/benchmarks.md includes."""
    RESULTS.mkdir(exist_ok=True)
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} cores", "when": time.strftime("%Y-%m-%d"), **results}
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(table)
    (RESULTS / f"{name}.md").write_text(text + ("\n\n" + notes if notes else "") + "\n")
    print(text)
    if notes:
        print("\n" + notes)


def markdown(table: list[list[str]]) -> str:
    """A Markdown table of ``table``'s rows, the first its head."""
    lines = ["| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in table[1:]])


def verdict(low: float, high: float, bound: float) -> str:
    """A lower bound's verdict by a median's 90% interval (``median_interval``): clear of the run's
    noise only when the whole interval is on one side of ``bound``."""
    return "met" if low >= bound else "not met" if high < bound else "within the noise"


def median_interval(values: list[float], coverage: float = 0.90) -> tuple[float, float]:
    """An interval that holds the median of the distribution ``values`` were drawn from with at
    least ``coverage`` probability, whatever that distribution: the k-th smallest and the k-th largest
    value, k as large as the binomial distribution allows (7 values: the smallest and the largest, 98%;
    9 values: the second smallest and the second largest, 96%). Fewer than 5 values cannot reach 90%:
    then it is the smallest and the largest."""
    ordered, n = sorted(values), len(values)
    k, outside = 1, 2 * 0.5**n  # P(the median lies below the smallest or above the largest value)
    while k < n // 2 and outside + 2 * math.comb(n, k) * 0.5**n <= 1 - coverage:
        outside += 2 * math.comb(n, k) * 0.5**n
        k += 1
    return ordered[k - 1], ordered[n - k]


def interleaved(
    variants: dict[str, tuple[Callable[[], Any], int]], rounds: int, before_each: Callable[[], Any] = lambda: None
) -> dict[str, float]:
    """Operations per second of each variant: run A, B, C, A, B, C, ... and keep each one's median.

    Interleaving exposes every variant to the same background load, so the ratios hold on a shared,
    noisy machine even when absolute rates drift. One untimed warm-up run of each comes first.
    """
    for fn, _ in variants.values():
        before_each()
        fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (fn, operations) in variants.items():
            before_each()
            samples[name].append(operations / timed(fn))
    return {name: statistics.median(rates) for name, rates in samples.items()}


def can_count_instructions() -> bool:
    return shutil.which("valgrind") is not None


def instructions(module: str, *args: str) -> int:
    """Instructions ``python -m module args`` runs inside its ``counted()`` blocks, under callgrind.

    Unlike CPU time, the count does not drift with what else the shared machine is doing: within a
    percent or two from run to run of the same code, so a change of a few percent shows."""
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=/dev/null"]
    run = subprocess.run([*command, sys.executable, "-m", module, *args], capture_output=True, text=True, check=True)
    line = next(line for line in run.stderr.splitlines() if "Collected" in line)
    return int(line.rsplit(" ", 1)[1])


@contextmanager
def counted() -> Iterator[None]:
    """Count this block's instructions when running under ``instructions()`` (callgrind)."""
    subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run(["callgrind_control", "--instr=off", str(os.getpid())], check=True, capture_output=True)


PG_BIN = Path("/usr/lib/postgresql/15/bin")


class PrivatePostgres:
    """A throwaway PostgreSQL (``initdb`` in a temporary directory, ``pg_ctl``) on a free loopback
    port, run as the ``postgres`` user when this process is root (``initdb`` refuses root)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"
        self.dir: Path | None = None

    @staticmethod
    def available() -> bool:
        if not (PG_BIN / "pg_ctl").exists():
            return False
        try:
            return os.geteuid() != 0 or bool(pwd.getpwnam("postgres"))
        except KeyError:
            return False

    def _run(self, *args: str) -> None:
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*as_postgres, *args], check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    def start(self) -> PrivatePostgres:
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="activity-chaos-pg-"))
            if os.geteuid() == 0:
                shutil.chown(self.dir, "postgres")
            self._run(
                str(PG_BIN / "initdb"), "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres", "-E", "UTF8"
            )
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
        self._run(
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(self.dir / "data"),
            "-o",
            options,
            "-l",
            str(self.dir / "log"),
            "-w",
            "start",
        )
        return self

    def halt(self, mode: str = "fast") -> None:
        """``pg_ctl stop``: ``fast`` (a clean stop) or ``immediate`` (as a crash: recovery at the next start)."""
        assert self.dir is not None
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.dir / "data"), "-m", mode, "-w", "stop")

    def stop(self) -> None:
        if self.dir is not None:
            with contextlib.suppress(subprocess.CalledProcessError):  # not running
                self.halt()
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def end(process: subprocess.Popen[Any] | None, sig: int = signal.SIGTERM, wait: float = 30) -> int | None:
    """Stop a process started in its own process group, then whatever is left of the group. Its exit
    code, or None when it had not exited ``wait`` seconds after ``sig`` (it was killed)."""
    if process is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        if process.poll() is None:
            process.send_signal(sig)
    code = None
    with contextlib.suppress(subprocess.TimeoutExpired):
        code = process.wait(timeout=wait)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)
    return code


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (granian's workers), from /proc."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def wait_log(read: Callable[[], str], done: Callable[[str], bool], timeout: float, what: str) -> None:
    """Poll a process's log until ``done`` says so."""
    deadline = time.monotonic() + timeout
    while not done(read()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)
