"""Slow clients against the service as ``make run`` serves it, no proxy in front
(``python -m bench.slow_clients``).

64 sockets trickle a request's headers, a byte a second, and 64 send whole headers then hold a
half-sent body; each one the server closes is replaced at once, so 128 are held for 60 s while a
fresh ``GET /healthz`` is sent every 100 ms. It records each probe's answer time, and when and how
the server closed each slow socket (granian's header timeout, ``WEB_HEADER_TIMEOUT``; the front's
408, ``WEB_BODY_TIMEOUT``). ``tests/test_serving.py`` runs the same siege with short timeouts.
Writes ``bench/results/slow_clients.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import selectors
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import harness
from project.redis_server import PrivateRedis, free_port
from project.serving import default_workers, granian_command

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
BODY_DECLARED = 10_000  # bytes a held body says it has; it sends 10


@dataclass
class Slow:
    """One slow socket: what it is doing, when it opened, and when and how the server ended it."""

    kind: str  # "headers" or "body"
    sock: socket.socket
    opened: float
    closed: float | None = None
    answer: bytes = b""

    @property
    def status(self) -> int | None:
        parts = self.answer.split(b" ", 2)
        return int(parts[1]) if len(parts) > 1 and parts[0].startswith(b"HTTP/") else None


@dataclass
class Siege:
    """The slow sockets' fates and the fresh probes' answer times (None: no answer within 5 s)."""

    slow: list[Slow] = field(default_factory=list)
    probes: list[float | None] = field(default_factory=list)
    ended: float = 0.0

    def closed_after(self, kind: str) -> list[float]:
        """Seconds from opening to the server's close, for each socket of ``kind`` it closed."""
        return [s.closed - s.opened for s in self.slow if s.kind == kind and s.closed is not None]

    def still_open(self, kind: str) -> int:
        return sum(1 for s in self.slow if s.kind == kind and s.closed is None)

    def overdue(self, kind: str, seconds: float) -> int:
        """Sockets of ``kind`` still open at the end, opened more than ``seconds`` before it."""
        return sum(1 for s in self.slow if s.kind == kind and s.closed is None and self.ended - s.opened > seconds)

    def statuses(self, kind: str) -> set[int | None]:
        return {s.status for s in self.slow if s.kind == kind and s.closed is not None}

    def p99_ms(self) -> float:
        """The probes' 99th percentile, a probe with no answer counted as 5 s."""
        times = sorted(1000 * (t if t is not None else 5.0) for t in self.probes)
        return times[min(len(times) - 1, int(0.99 * len(times)))]


def open_slow(port: int, kind: str, path: str) -> Slow:
    opened = time.monotonic()  # before connecting: the server's timeouts count from its accept, after it
    sock = socket.create_connection((HOST, port), timeout=5)
    if kind == "headers":
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nX-Slow: ".encode())
    else:
        head = f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\n"
        sock.sendall(f"{head}Content-Length: {BODY_DECLARED}\r\n\r\n".encode() + b'{"events":')
    sock.setblocking(False)
    return Slow(kind, sock, opened)


def probe(port: int, path: str) -> float | None:
    """A fresh connection's ``GET path``: seconds to the whole answer, None when none came in 5 s."""
    started = time.monotonic()
    connection = http.client.HTTPConnection(HOST, port, timeout=5)
    try:
        connection.request("GET", path)
        connection.getresponse().read()
        return time.monotonic() - started
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def siege(
    port: int,
    seconds: float,
    slow_headers: int = 64,
    slow_bodies: int = 64,
    probe_path: str = "/healthz",
    body_path: str = "/api/v1/events/",
) -> Siege:
    """Hold the slow sockets for ``seconds`` (trickling a header byte a second into each of the first
    kind, replacing each the server closes) while probing every 100 ms; those still open at the end
    are closed by us."""
    found = Siege()
    found.slow = [open_slow(port, "headers", probe_path) for _ in range(slow_headers)]
    found.slow += [open_slow(port, "body", body_path) for _ in range(slow_bodies)]
    done = threading.Event()

    def probing() -> None:
        while not done.wait(0.1):
            found.probes.append(probe(port, probe_path))

    prober = threading.Thread(target=probing)
    prober.start()
    selector = selectors.DefaultSelector()
    for slow in found.slow:
        selector.register(slow.sock, selectors.EVENT_READ, slow)
    deadline, next_trickle = time.monotonic() + seconds, time.monotonic() + 1
    try:
        while time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.05):
                slow = key.data
                try:
                    data = slow.sock.recv(4096)
                except OSError:
                    data = b""
                slow.answer += data
                if not data:
                    slow.closed = time.monotonic()
                    selector.unregister(slow.sock)
                    replaced = open_slow(port, slow.kind, probe_path if slow.kind == "headers" else body_path)
                    found.slow.append(replaced)
                    selector.register(replaced.sock, selectors.EVENT_READ, replaced)
            if time.monotonic() >= next_trickle:
                next_trickle += 1
                for slow in found.slow:
                    if slow.kind == "headers" and slow.closed is None:
                        with contextlib.suppress(OSError):  # reset: the server gave up; read above
                            slow.sock.send(b"x")
    finally:
        found.ended = time.monotonic()
        done.set()
        prober.join()
        selector.close()
        for slow in found.slow:
            slow.sock.close()
    return found


def serve(tmp: Path, redis_url: str, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """The example project, migrated, served by granian as ``make run`` starts it."""
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
        "REDIS_URL": redis_url,
        "HOST": HOST,
        "PORT": str(port),
        **env,
    }
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    log = (tmp / "granian.log").open("wb")
    server = subprocess.Popen(
        granian_command(sys.executable, env),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        process_group=0,  # its workers are found and stopped with it (bench.chaos signals them)
    )
    deadline = time.monotonic() + 60
    while probe(port, "/healthz") is None:
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"granian did not start: {(tmp / 'granian.log').read_text()[-3000:]}")
        time.sleep(0.2)
    return server


def summary(found: Siege) -> dict[str, Any]:
    answered = [t for t in found.probes if t is not None]
    return {
        "probes": len(found.probes),
        "probes_unanswered": len(found.probes) - len(answered),
        "probe_p50_ms": 1000 * statistics.median(answered) if answered else None,
        "probe_p99_ms": found.p99_ms(),
        "probe_max_ms": 1000 * max(answered, default=0.0),
        **{
            f"{kind}_{key}": value
            for kind in ("headers", "body")
            for key, value in (
                ("closed", len(found.closed_after(kind))),
                ("held_at_the_end", found.still_open(kind)),
                ("closed_after_s_min", min(found.closed_after(kind), default=None)),
                ("closed_after_s_max", max(found.closed_after(kind), default=None)),
                ("statuses", sorted(str(s) for s in found.statuses(kind))),
            )
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60, help="how long the slow sockets are held")
    parser.add_argument("--sockets", type=int, default=64, help="of each kind")
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="activity-slow-") as name, PrivateRedis() as redis_server:
        server = serve(Path(name), redis_server.url, port, {})
        try:
            found = summary(siege(port, args.seconds, args.sockets, args.sockets))
        finally:
            server.terminate()
            server.wait(timeout=30)

    def fmt(value: Any) -> str:
        return (
            f"{value:,.1f}" if isinstance(value, float) else ", ".join(value) if isinstance(value, list) else str(value)
        )

    table = [["measure", "value"], *([key.replace("_", " "), fmt(value)] for key, value in found.items())]
    notes = (
        f"granian as `make run` starts it ({default_workers()} workers, default timeouts: headers 10 s, body 30 s), "
        f"no proxy; {args.sockets} sockets trickling headers a byte a second and {args.sockets} holding a half-sent "
        f"body (Content-Length {BODY_DECLARED:,}, 10 bytes sent), each one the server closed replaced at once, for "
        f"{args.seconds:g} s, while a fresh `GET /healthz` went every 100 ms (an unanswered probe counts as 5 s "
        "in the p99). Closed after: seconds from a slow socket's opening to the server's close; statuses: what "
        "the server answered before closing (None: closed without an answer). Command: "
        "`python -m bench.slow_clients`."
    )
    harness.write("slow_clients", {"seconds": args.seconds, "sockets": args.sockets, **found}, table, notes)


if __name__ == "__main__":
    main()
