"""Open live streams against a tracked page's rate on one worker (``python -m bench.live``).

One granian worker as ``make run`` starts it (``project/asgi.py``), a private redis-server and a
SQLite file; wrk drives the tracked page as ``bench.http`` does (an anonymous visitor sending its
cookie back), in interleaved rounds: without streams, then with ``--streams`` open
``GET /api/v1/live/`` streams held by a second process that reads every event they send, while a
new user's event every 0.25 s moves the figures in both halves (so each stream gets an event a second). Each round's
"with" rate over its "without" rate is the ratio kept (median); the target is at least 0.90 with
2,000 streams. It also reports how long the streams took to open, the events they received, and
the worker's full garbage collections in each half (``bench/gc_probe.py``'s record): what the
streams' objects cost the collector.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import redis

from bench import harness
from bench.web import (
    BROWSER,
    PAGE_PATH,
    Case,
    CpuMeter,
    configure,
    granian_server,
    prepare_database,
    run_wrk,
    visitor_cookie,
)
from project.redis_server import PrivateRedis

TARGET = 0.90
OPENING = 200  # streams opened at once by the holder


async def hold(url: str, token: str, streams: int) -> None:
    """Open ``streams`` streams, print ``ready <seconds>`` once each has sent its first event, read
    them all until SIGTERM, then print ``events <n>``."""
    parts = urlsplit(url)
    request = (
        f"GET /api/v1/live/ HTTP/1.1\r\nHost: {parts.hostname}\r\nAuthorization: Token {token}\r\n"
        "Accept: text/event-stream\r\n\r\n"
    ).encode()
    events = 0  # every stats event the streams received, their first ones included
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)

    async def open_one() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A stream, once its first event came (the writer kept: a writer collected closes it)."""
        nonlocal events
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        writer.write(request)
        seen = b""
        while b"event: stats" not in seen:
            chunk = await reader.read(65536)
            if not chunk:
                raise RuntimeError(f"a stream closed before its first event: {seen[:300]!r}")
            seen += chunk
        events += seen.count(b"event: stats")
        return reader, writer

    async def read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal events
        while chunk := await reader.read(65536):
            events += chunk.count(b"event: stats")

    started = time.monotonic()
    opened = []
    for start in range(0, streams, OPENING):
        opened += await asyncio.gather(*(open_one() for _ in range(min(OPENING, streams - start))))
    print(f"ready {time.monotonic() - started:.3f}", flush=True)
    tasks = [asyncio.create_task(read(*stream)) for stream in opened]
    await stop.wait()
    print(f"events {events}", flush=True)
    for task in tasks:
        task.cancel()


class Ticker:
    """New activity through the API every ``every`` seconds (a user never seen before, so the online
    figure moves), in both halves of a round: the streams then carry an event a second, as a
    dashboard's do on a live site."""

    def __init__(self, base: str, token: str, every: float = 0.25) -> None:
        self.url, self.token, self.every = base + "/api/v1/events/", token, every
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        n = 0
        while not self.done.wait(self.every):
            n += 1
            body = json.dumps({"events": [{"user": f"ticker{n}", "path": f"/live/{n % 7}"}]}).encode()
            headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json"}
            urllib.request.urlopen(urllib.request.Request(self.url, body, headers), timeout=10).close()

    def stop(self) -> None:
        self.done.set()
        self.thread.join()


class Holder:
    """The streams, held by a process of their own (``--hold``)."""

    def __init__(self, base: str, token: str, streams: int) -> None:
        command = [sys.executable, "-m", "bench.live", "--hold", base, "--token", token, "--streams", str(streams)]
        self.started = time.monotonic()
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line.startswith("ready "):
            self.process.kill()
            raise RuntimeError(f"the holder failed: {line}")
        self.opened_s = float(line.split()[1])

    def stop(self) -> int:
        """Close the streams; the events they received."""
        self.process.send_signal(signal.SIGTERM)
        line = self.process.stdout.readline()
        self.process.wait(timeout=30)
        return int(line.split()[1])


def settle(base: str, token: str, timeout: float = 60) -> None:
    """Wait until the server has ended every stream it opened (its ``/metrics``), so a "without" run
    does not measure the end of the "with" run's streams."""

    def count(name: str) -> float:
        request = urllib.request.Request(base + "/metrics", headers={"Authorization": f"Token {token}"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            found = [line for line in answer.read().decode().splitlines() if line.startswith(name + " ")]
        return float(found[0].split()[1]) if found else 0.0

    deadline = time.monotonic() + timeout
    while count("activity_live_streams_closed_total") < count("activity_live_streams_opened_total"):
        if time.monotonic() > deadline:
            raise RuntimeError("the server did not end its streams")
        time.sleep(0.5)


def full_collections(probes: Path, spans: list[tuple[float, float]]) -> dict[str, float]:
    """The worker's full collections that started within ``spans`` (its probe's record, written as
    it stopped): how many a second, and milliseconds collecting a second."""
    found = [json.loads(path.read_text()) for path in probes.glob("*.json")]
    if not found:
        raise RuntimeError("the worker wrote no collection record (bench/gc_probe.py)")
    pauses = [
        pause
        for worker in found
        for generation, start, pause in worker["collections"]
        if generation == 2 and any(began <= start <= ended for began, ended in spans)
    ]
    seconds = sum(ended - began for began, ended in spans)
    return {"per_s": len(pauses) / seconds, "ms_per_s": sum(pauses) / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=5, help="per wrk run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--hold", metavar="URL", help=argparse.SUPPRESS)
    parser.add_argument("--token", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hold:
        # The streams' readers stand for browsers on other machines: on this one they yield the
        # cores to the server and wrk (the sockets' buffers keep what they have not read yet).
        os.nice(19)
        asyncio.run(hold(args.hold, args.token, args.streams))
        return
    if not shutil.which("wrk"):
        sys.exit("wrk is missing: apt-get install wrk")
    with (
        tempfile.TemporaryDirectory(prefix="activity-live-bench-") as name,
        PrivateRedis() as store,
        ExitStack() as stack,
    ):
        tmp = Path(name)
        configure(tmp, store.url)
        credentials = prepare_database()
        probes = tmp / "gc"
        probes.mkdir()
        server = granian_server("granian", 1, "bench.gc_probe:application", env={"GC_PROBE_DIR": str(probes)})
        server.start(tmp / "granian.log")
        try:
            page = Case(
                "page", "tracked page", server.base + PAGE_PATH, {"Cookie": visitor_cookie(server.base), **BROWSER}
            )
            run_wrk(page, 1, args.connections)  # warm-up
            ticker = Ticker(server.base, credentials["token"])
            meter = CpuMeter(server.process.pid, stack.enter_context(redis.Redis.from_url(store.url)))
            without, with_streams, opened, per_second = [], [], [], []
            cpu: dict[str, list[float]] = {"without": [], "with": []}
            runs: dict[str, list[tuple[float, float]]] = {"without": [], "with": []}  # each wrk run's (start, end)
            for number in range(args.rounds):
                began = time.time()
                sample = run_wrk(page, args.seconds, args.connections, meter)
                runs["without"].append((began, time.time()))
                without.append(sample.rate)
                cpu["without"].append(sample.cpu_us["server_user"] + sample.cpu_us["server_kernel"])
                holder = Holder(server.base, credentials["token"], args.streams)
                began = time.time()
                sample = run_wrk(page, args.seconds, args.connections, meter)
                runs["with"].append((began, time.time()))
                with_streams.append(sample.rate)
                cpu["with"].append(sample.cpu_us["server_user"] + sample.cpu_us["server_kernel"])
                held = time.monotonic() - holder.started
                per_second.append(holder.stop() / args.streams / held)
                settle(server.base, credentials["token"])
                opened.append(holder.opened_s)
                print(f"round {number + 1}/{args.rounds}: {with_streams[-1] / without[-1]:.2f}", flush=True)
            ticker.stop()
        finally:
            server.stop()
        full = {half: full_collections(probes, spans) for half, spans in runs.items()}
    ratios = [w / wo for w, wo in zip(with_streams, without, strict=True)]
    ratio, (low, high) = statistics.median(ratios), harness.median_interval(ratios)
    results = {
        "streams": args.streams,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "connections": args.connections,
        "workers": 1,
        "page_rate_without": statistics.median(without),
        "page_rate_with": statistics.median(with_streams),
        "ratio": ratio,
        "ratio_interval": [low, high],
        "target": TARGET,
        "met": ratio >= TARGET,
        "interval_verdict": harness.verdict(low, high, TARGET),
        "open_seconds": statistics.median(opened),
        "events_per_stream_per_second": statistics.median(per_second),
        "server_cpu_us_per_page_without": statistics.median(cpu["without"]),
        "server_cpu_us_per_page_with": statistics.median(cpu["with"]),
        "full_collections": full,
    }
    table = [
        ["measure", "value"],
        ["tracked page, requests/s without streams", f"{results['page_rate_without']:,.0f}"],
        [f"tracked page, requests/s with {args.streams:,} streams open", f"{results['page_rate_with']:,.0f}"],
        [
            "ratio (median of rounds, 90% interval)",
            f"{ratio:.2f} ({low:.2f}-{high:.2f}); target >= {TARGET}: {'met' if results['met'] else 'not met'}, "
            f"by the interval {results['interval_verdict']}",
        ],
        [f"seconds to open {args.streams:,} streams", f"{results['open_seconds']:.1f}"],
        ["events a stream received per second held", f"{results['events_per_stream_per_second']:.2f}"],
        [
            "server CPU per tracked page, us: without / with the streams",
            f"{results['server_cpu_us_per_page_without']:.0f} / {results['server_cpu_us_per_page_with']:.0f}",
        ],
        [
            "full collections a second, and their ms a second: without / with the streams",
            " / ".join(f"{full[half]['per_s']:.2f}, {full[half]['ms_per_s']:.0f} ms" for half in ("without", "with")),
        ],
    ]
    notes = (
        f"`python -m bench.live --streams {args.streams} --rounds {args.rounds} --seconds {args.seconds}`: one "
        f"granian worker, wrk with {args.connections} connections on the tracked page, {args.rounds} interleaved "
        "rounds (without, then with the streams, held and read by a second process at the lowest priority, as "
        "browsers on other machines would be)."
    )
    harness.write("live", results, table, notes)


if __name__ == "__main__":
    main()
