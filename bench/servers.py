"""Ways to serve the service, side by side on its bare view (``python -m bench.servers``): how fast
each answers, and whether it still answers while clients hold half-sent bodies.

One run starts, with the same worker processes (``make run``'s count, one per CPU, unless
``--workers``), each of:

- ``make run``'s server: granian, ``project.asgi``'s front, Django on one thread of the process's,
  each whole request handed to it through an executor;
- the same front with Django run on the event loop's own thread, no hand-off
  (``bench.server_apps.on_the_loop``);
- the same front with asgiref's ``WsgiToAsgi`` (``make run``'s before; ``bench.server_apps.asgiref``);
- granian's WSGI interface, one blocking thread per worker, serving ``project.wsgi``;
- gunicorn gthread, one thread per worker (``make run``'s server before granian);
- ``make run``'s server with twice the workers (what the default of one per CPU leaves out);
- ``make run``'s server with granian's single-threaded Rust runtime (``--runtime-mode st``: it
  picks the multi-threaded one for any interface but RSGI), and with its Rust task implementation
  (``--task-impl rust``, experimental, Python 3.11 at most) in place of asyncio's tasks,

then runs wrk on ``bench.http``'s floor (a bare Django view, not tracked), round after round, each
server right after a run of gunicorn: its rate and its server processes' CPU per request over those
of the gunicorn run just before (the machine's speed drifts within a minute), each ratio's median
over the rounds with a 90% interval (``harness.median_interval``).
Then, against each: ``HELD`` sockets send a form POST to ``/admin/login/`` with a CSRF cookie, whose
middleware reads the body before any view, and send only part of the body; five fresh
``GET /healthz`` follow, each given 5 s. Writes ``bench/results/servers.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import harness
from bench.slow_clients import probe
from bench.web import (
    FLOOR_PATH,
    HOST,
    Case,
    CpuMeter,
    Sample,
    Server,
    configure,
    granian_server,
    gunicorn_server,
    prepare_database,
    run_wrk,
)
from project.redis_server import PrivateRedis
from project.serving import default_workers, granian_command

HELD = 16  # half-sent bodies held: eight per worker on two


def server_cpu(sample: Sample) -> float:
    """The server's processes' CPU microseconds per request, user and kernel."""
    assert sample.cpu_us is not None
    return sample.cpu_us["server_user"] + sample.cpu_us["server_kernel"]


def with_options(server: Server, *options: str) -> Server:
    """``server``, a granian one, with granian ``options`` before its application."""
    server.command[-1:-1] = options
    return server


def candidates(workers: int) -> list[tuple[str, Server]]:
    """Each server to measure, with what it is."""
    wsgi = Server("granian-wsgi", [])
    env = {"HOST": HOST, "PORT": str(wsgi.port), "WEB_CONCURRENCY": str(workers)}
    wsgi.command = granian_command(sys.executable, env, "project.wsgi:application")
    wsgi.command[wsgi.command.index("--interface") + 1] = "wsgi"
    with_options(wsgi, "--blocking-threads", "1")
    return [
        ("make run's: granian, the front, Django on a thread of its own", granian_server("one-thread", workers)),
        (
            "granian, the front, Django on the event loop's thread",
            granian_server("on-the-loop", workers, "bench.server_apps:on_the_loop"),
        ),
        (
            "granian, the front, asgiref's WsgiToAsgi (make run's before)",
            granian_server("asgiref", workers, "bench.server_apps:asgiref"),
        ),
        ("granian's WSGI interface, 1 blocking thread a worker", wsgi),
        ("gunicorn gthread, 1 thread a worker (make run's before granian)", gunicorn_server(workers)),
        (f"make run's with twice the workers ({2 * workers})", granian_server("one-thread-2x", 2 * workers)),
        (
            "make run's on granian's single-threaded runtime",
            with_options(granian_server("runtime-st", workers), "--runtime-mode", "st"),
        ),
        (
            "make run's with granian's Rust tasks",
            with_options(granian_server("task-rust", workers), "--task-impl", "rust"),
        ),
    ]


def held_bodies(port: int, probes: int) -> list[float | None]:
    """``probes`` fresh requests' answer times (None: none within 5 s) while ``HELD`` sockets hold a
    half-sent form body that Django's CSRF middleware reads."""
    with urllib.request.urlopen(f"http://{HOST}:{port}/admin/login/", timeout=10) as reply:
        token = re.search(r"csrftoken=([^;]+)", reply.headers["Set-Cookie"]).group(1)
    head = (
        f"POST /admin/login/ HTTP/1.1\r\nHost: {HOST}\r\nCookie: csrftoken={token}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 10000\r\n\r\nusername="
    )
    held = [socket.create_connection((HOST, port), timeout=10) for _ in range(HELD)]
    try:
        for sock in held:
            sock.sendall(head.encode())
        time.sleep(0.5)  # each worker takes its first
        return [probe(port, "/healthz") for _ in range(probes)]
    finally:
        for sock in held:
            sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds of every server")
    parser.add_argument("--seconds", type=int, default=2, help="per wrk run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--probes", type=int, default=5, help="fresh requests per server while bodies are held")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is missing: apt-get install wrk")
    under_test = candidates(args.workers)
    reference = next(label for label, server in under_test if server.name == "gunicorn")
    samples: dict[str, list[Sample]] = {label: [] for label, _ in under_test}
    ratios: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in under_test if label != reference}
    probes: dict[str, list[float | None]] = {}
    with tempfile.TemporaryDirectory(prefix="activity-servers-bench-") as name, PrivateRedis() as redis_server:
        tmp = Path(name)
        configure(tmp, redis_server.url)
        prepare_database()
        from activity.store.client import get_client

        try:
            for _, server in under_test:
                server.start(tmp / f"{server.name}.log")
            floor = {label: Case("floor", "floor", server.base + FLOOR_PATH) for label, server in under_test}
            meters = {label: CpuMeter(server.process.pid, get_client()) for label, server in under_test}

            def run(label: str) -> Sample:
                sample = run_wrk(floor[label], args.seconds, args.connections, meters[label])
                if sample.errors:
                    raise RuntimeError(f"{label}: {sample.errors} failed requests")
                samples[label].append(sample)
                return sample

            for label, _ in under_test:
                run_wrk(floor[label], 1, args.connections)  # warm-up: every worker imports, connects
            for number in range(args.rounds):
                for label in ratios:
                    gunicorn, sample = run(reference), run(label)
                    ratios[label].append((sample.rate / gunicorn.rate, server_cpu(sample) / server_cpu(gunicorn)))
                print(f"round {number + 1}/{args.rounds} done", flush=True)
            for label, server in under_test:
                probes[label] = held_bodies(server.port, args.probes)
        finally:
            for _, server in under_test:
                server.stop()
    rows: dict[str, dict[str, Any]] = {}
    for label, _ in under_test:
        rates, cpu = zip(*ratios.get(label, [(1.0, 1.0)]), strict=True)
        answered = [t for t in probes[label] if t is not None]
        rows[label] = {
            "requests_per_s": statistics.median(s.rate for s in samples[label]),
            "vs_gunicorn": statistics.median(rates),
            "interval_90": [round(bound, 3) for bound in harness.median_interval(list(rates))],
            "server_cpu_us_per_request": statistics.median(server_cpu(s) for s in samples[label]),
            "cpu_vs_gunicorn": statistics.median(cpu),
            "cpu_interval_90": [round(bound, 3) for bound in harness.median_interval(list(cpu))],
            "probes_answered_while_held": f"{len(answered)} of {args.probes}",
            "probe_max_ms_while_held": 1000 * max(answered) if answered else None,
            "requests_per_s_each_run": [round(s.rate) for s in samples[label]],
        }
    table = [["server", "req/s", "vs gunicorn", "CPU us/request", "CPU vs gunicorn's", "answers, bodies held"]]
    for label, row in rows.items():
        held = row["probes_answered_while_held"]
        if row["probe_max_ms_while_held"] is not None:
            held += f", slowest {row['probe_max_ms_while_held']:,.0f} ms"
        rate = "{:.2f}x ({:.2f}x-{:.2f}x)".format(row["vs_gunicorn"], *row["interval_90"])
        cpu = "{:.2f}x ({:.2f}x-{:.2f}x)".format(row["cpu_vs_gunicorn"], *row["cpu_interval_90"])
        table.append(
            [label, f"{row['requests_per_s']:,.0f}", rate, f"{row['server_cpu_us_per_request']:,.0f}", cpu, held]
        )
    notes = (
        f"{args.workers} worker processes each (but the twice-the-workers row), DEBUG off, SQLite, private "
        f"redis-server; wrk with 1 thread and {args.connections} connections on loopback against `bench.http`'s "
        f"floor (a bare Django view, not tracked), {args.seconds} s per run, {args.rounds} rounds, each server "
        "right after a run of gunicorn; a ratio is the median of those adjacent pairs' (the 90% interval of the "
        "median in brackets, read from their order statistics: `harness.median_interval`). CPU: the server's "
        "processes' user and kernel time per request, from /proc; on a machine shared with other work, the CPU per "
        "request says more of a server's cost than its rate, which also follows the share of the cores its "
        f"processes get. Answers, bodies held: of {args.probes} fresh `GET /healthz` (5 s each), how many "
        f"answered while {HELD} sockets held a form POST to `/admin/login/` with a CSRF cookie and 9 of its 10,000 "
        "bytes (Django's CSRF middleware reads the body before any view). Command: `python -m bench.servers`."
    )
    harness.write("servers", {"workers": args.workers, "rounds": args.rounds, "servers": rows}, table, notes)


if __name__ == "__main__":
    main()
