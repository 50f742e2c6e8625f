"""CPU per request in process: the service's requests called straight through Django's WSGI handler,
no server, no load generator (``python -m bench.request_cpu``).

``bench.http`` measures the service as clients see it, but on a shared 2-core machine its ratios swing
from run to run (wrk, the workers and Redis share the cores, and wrk's connections land unevenly on
the workers). Here one process calls the same URLs as ``bench.http`` (same settings, URLconf, private
redis-server and SQLite database) and counts the CPU each request costs the process
(``time.process_time``: the request and the tracking batches' thread, which sends what the requests
handed over), in interleaved rounds, each case's median kept. The cost a case adds over its floor is
what the service's own code costs that request; the batches' thread's part of it is shown apart.
Redis's own CPU is not counted. Where valgrind is installed, each case is also counted in
instructions by callgrind (one process per case): CPU time on a shared machine still drifts by
10-20% between runs, the instruction count by a percent or two, so a change's effect shows even when
it is a few percent. Writes ``bench/results/request_cpu.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import redis

from bench import harness
from bench.web import (
    BROWSER,
    DRF_PATH,
    FLOOR_PATH,
    PAGE_PATH,
    READ_USER,
    configure,
    page_view_batch,
    prepare_database,
    seed_online,
)
from project.redis_server import PrivateRedis

ONE_EVENT = b'{"events": [{"user": "u1"}]}'
HUNDRED_VIEWS = json.dumps(page_view_batch(100)).encode()


@dataclass
class Case:
    key: str
    name: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    floor: str = ""  # the case its added cost is read against
    credentials: str = ""  # who asks: "" a browser, "visitor" (its cookie), "session" or "token"


def environ(case: Case) -> dict[str, Any]:
    """The WSGI environ gunicorn would hand Django for ``case``'s request."""
    found = {
        "REQUEST_METHOD": "POST" if case.body else "GET",
        "PATH_INFO": case.path,
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1:8000",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(case.body),
    }
    if case.body:
        found.update({"CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(case.body))})
    found.update({"HTTP_" + name.upper().replace("-", "_"): value for name, value in case.headers.items()})
    return found


Caller = Callable[[Case], tuple[str, list[tuple[str, str]]]]


def caller() -> Caller:
    """A function answering one request of a case through Django's WSGI handler: (status, headers)."""
    from django.core.handlers.wsgi import WSGIHandler

    handler = WSGIHandler()

    def call(case: Case) -> tuple[str, list[tuple[str, str]]]:
        answer: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            answer.update(status=status, headers=headers)

        response = handler(environ(case), start_response)
        b"".join(response)
        response.close()
        return answer["status"], answer["headers"]

    return call


def visitor_cookie(call: Caller) -> str:
    """The visitor cookie the middleware hands an anonymous browser on its first page."""
    from activity.web import middleware

    _, headers = call(Case("first", "first page", PAGE_PATH, BROWSER))
    name = middleware.VISITOR_COOKIE_NAME
    cookies = [value.strip().split(";", 1)[0] for header, value in headers if header == "Set-Cookie"]
    return next(cookie for cookie in cookies if cookie.startswith(f"{name}="))


def batches_thread_cpu() -> float:
    """CPU seconds of this process's tracking-batches thread so far (0 before it starts)."""
    thread = next((t for t in threading.enumerate() if t.name == "activity-track-batches"), None)
    return 0.0 if thread is None else time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


BATCH_WHEN_COUNTED = 20  # requests per batch of the tracking batches' thread, when counting instructions
CASES = [
    Case("floor", "floor: bare view, anonymous, not tracked", FLOOR_PATH),
    Case(
        "page_anonymous",
        "same view tracked, anonymous visitor (cookie)",
        PAGE_PATH,
        floor="floor",
        credentials="visitor",
    ),
    Case("floor_signed_in", "bare view, signed in, not tracked", FLOOR_PATH, credentials="session"),
    Case("page_signed_in", "same view tracked, signed in", PAGE_PATH, floor="floor_signed_in", credentials="session"),
    Case("drf_floor", "bare DRF view", DRF_PATH, credentials="token"),
    Case(
        "last_seen",
        "GET /api/v1/users/<u>/last-seen/",
        f"/api/v1/users/{READ_USER}/last-seen/",
        floor="drf_floor",
        credentials="token",
    ),
    Case(
        "post_1",
        "POST /api/v1/events/, 1 event",
        "/api/v1/events/",
        body=ONE_EVENT,
        floor="drf_floor",
        credentials="token",
    ),
    Case(
        "post_100_views",
        "POST /api/v1/events/, 100 page views",
        "/api/v1/events/",
        body=HUNDRED_VIEWS,
        floor="drf_floor",
        credentials="token",
    ),
]


@contextmanager
def served() -> Iterator[tuple[Caller, list[Case], redis.Redis]]:
    """bench.http's site in this process (its settings, a private redis-server, SQLite), the cases
    with their credentials (each answers 2xx), and a client of that redis-server."""
    with tempfile.TemporaryDirectory(prefix="activity-cpu-bench-") as name, PrivateRedis() as redis_server:
        configure(Path(name), redis_server.url)
        credentials = prepare_database()
        seed_online()
        call = caller()
        headers = {
            "": BROWSER,
            "visitor": {"Cookie": visitor_cookie(call), **BROWSER},
            "session": {"Cookie": credentials["session"], **BROWSER},
            "token": {"Authorization": f"Token {credentials['token']}"},
        }
        cases = [replace(case, headers=headers[case.credentials]) for case in CASES]
        for case in cases:
            status, _ = call(case)
            if not status.startswith("2"):
                raise RuntimeError(f"{case.key}: {status}")
        with redis.Redis.from_url(redis_server.url) as client:
            yield call, cases, client


def redis_cpu(client: redis.Redis) -> float:
    """The redis-server's own CPU seconds so far (user + sys)."""
    info = client.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]


Samples = dict[str, list[float]]


def cpu_per_request(requests: int, rounds: int) -> tuple[Samples, Samples, Samples, Samples]:
    """Each case's CPU microseconds per request, its batches' thread's and Redis's, in interleaved
    rounds; and the parts of a 100-page-view batch's (``batch_parts``)."""
    with served() as (call, cases, client):
        cpu: Samples = {case.key: [] for case in cases}
        thread: Samples = {case.key: [] for case in cases}
        on_redis: Samples = {case.key: [] for case in cases}
        parts: Samples = {}
        for _ in range(rounds):
            for case in cases:
                for _ in range(50):  # warm-up, and what the previous case left in the batches goes out
                    call(case)
                time.sleep(0.1)
                started, started_thread, started_redis = time.process_time(), batches_thread_cpu(), redis_cpu(client)
                for _ in range(requests):
                    call(case)
                time.sleep(0.1)  # the batches' thread sends what these requests handed over
                cpu[case.key].append((time.process_time() - started) / requests * 1e6)
                thread[case.key].append((batches_thread_cpu() - started_thread) / requests * 1e6)
                on_redis[case.key].append((redis_cpu(client) - started_redis) / requests * 1e6)
            for part, value in batch_parts(requests // 10).items():
                parts.setdefault(part, []).append(value)
    return cpu, thread, on_redis, parts


def batch_parts(calls: int) -> dict[str, float]:
    """CPU microseconds per call of the two service functions a 100-page-view POST runs, called
    directly on the same body: the body's validation (``clean_batch``) and the recording
    (``ingest.record_events``: the store's Python, building and sending the one pipeline)."""
    from activity.services import ingest
    from activity.web.api.serializers import clean_batch

    data = json.loads(HUNDRED_VIEWS)
    started = time.process_time()
    for _ in range(calls):
        events = clean_batch(data)
    validated = time.process_time()
    for _ in range(calls):
        ingest.record_events(events, day_writes=ingest.PROCESS_DAY_WRITES)  # as the API view
    return {
        "validation": (validated - started) / calls * 1e6,
        "recording": (time.process_time() - validated) / calls * 1e6,
    }


def count_instructions(key: str, requests: int) -> None:
    """Under ``harness.instructions``: count only ``requests`` requests of case ``key`` (the batches'
    thread included), after set-up and warm-up.

    Under callgrind a request runs some 50x slower, so a 50 ms batch would carry one or two requests
    and charge each a whole round trip. Here a batch goes when ``BATCH_WHEN_COUNTED`` requests wait,
    whatever the time: about what one worker gathers in 50 ms under ``bench.http``'s load."""
    with served() as (call, cases, _):
        from activity.services import tracking

        tracking.BATCH_MS, tracking.BATCH_SIZE = 600_000, BATCH_WHEN_COUNTED
        case = next(case for case in cases if case.key == key)
        for _ in range(100):
            call(case)
        time.sleep(0.2)
        with harness.counted():
            for _ in range(requests):  # a multiple of BATCH_WHEN_COUNTED: as many batches go on every run
                call(case)
            time.sleep(1.0)  # the batches' thread sends the last full batch (slowly, under callgrind)


def instructions_per_request(requests: int) -> dict[str, float] | None:
    """Each case's instructions per request under callgrind, one process per case (None without
    valgrind, or when no request is to be counted)."""
    if not requests or not harness.can_count_instructions():
        return None
    args = ("--requests", str(requests), "--count-case")
    return {case.key: harness.instructions("bench.request_cpu", *args, case.key) / requests for case in CASES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="per case and round")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--counted", type=int, default=300, help="requests per case under callgrind (0: none)")
    parser.add_argument("--count-case", help=argparse.SUPPRESS)  # one case under callgrind
    args = parser.parse_args()
    if args.count_case:
        count_instructions(args.count_case, args.requests)
        return
    cpu, thread, on_redis, parts = cpu_per_request(args.requests, args.rounds)
    instructions = instructions_per_request(args.counted)
    rows = {
        case.key: {
            "name": case.name,
            "us_per_request": statistics.median(cpu[case.key]),
            "batches_thread_us": statistics.median(thread[case.key]),
            "redis_us": statistics.median(on_redis[case.key]),
            "instructions": None if instructions is None else instructions[case.key],
            "floor": case.floor,
        }
        for case in CASES
    }
    table = [
        [
            "case",
            "CPU us/request",
            "over its floor, us",
            "of which the batches' thread, us",
            "Redis us/request",
            "instructions",
            "over its floor",
        ]
    ]
    for row in rows.values():
        floor = rows[row["floor"]] if row["floor"] else None
        row["over_floor_us"] = None if floor is None else row["us_per_request"] - floor["us_per_request"]
        counted = row["instructions"]
        table.append(
            [
                row["name"],
                f"{row['us_per_request']:,.0f}",
                "" if floor is None else f"{row['over_floor_us']:,.0f} (over {row['floor']})",
                f"{row['batches_thread_us']:,.0f}",
                f"{row['redis_us']:,.0f}",
                "" if counted is None else f"{counted / 1000:,.0f}k",
                "" if counted is None or floor is None else f"{(counted - floor['instructions']) / 1000:,.0f}k",
            ]
        )
    batch = {part: statistics.median(values) for part, values in parts.items()}
    batch["redis"] = rows["post_100_views"]["redis_us"]
    batch["request"] = rows["drf_floor"]["us_per_request"]
    batch["rest"] = (
        rows["post_100_views"]["us_per_request"] - batch["validation"] - batch["recording"] - batch["request"]
    )
    total = rows["post_100_views"]["us_per_request"] + batch["redis"]
    where = [
        ("the bare DRF view's request: Django, DRF, the token's authentication", batch["request"]),
        ("the body's validation (`clean_batch`)", batch["validation"]),
        (
            "recording: the store's Python (`ingest.record_events`), building and sending one pipeline",
            batch["recording"],
        ),
        ("the rest: parsing the JSON body, permission, throttle, the request's own tracking", batch["rest"]),
        ("Redis's own CPU (its scripts)", batch["redis"]),
    ]
    breakdown = "\n".join(
        ["| where a 100-page-view POST's CPU goes | us | share |", "|---|---:|---:|"]
        + [f"| {what} | {us:,.0f} | {us / total:.0%} |" for what, us in where]
        + [f"| **in all** | {total:,.0f} | |"]
    )
    notes = (
        f"In one process through Django's WSGI handler (no server), bench.http's settings and URLs, a private "
        f"redis-server and SQLite; {args.requests} requests per case and round, medians of {args.rounds} interleaved "
        "rounds, CPU of the whole process by time.process_time (the batches' thread included; Redis's own in its "
        f"column, from its INFO); instructions: callgrind, {args.counted} requests of each case after its warm-up "
        "(within 2% from run to run). Command: `python -m bench.request_cpu`.\n\n"
        f"{breakdown}\n\nValidation and recording are the two service functions called directly on the same body "
        "(medians over the rounds); the request's part is the bare DRF view's; the rest is what remains of the POST's "
        "process CPU."
    )
    results = {"requests": args.requests, "rounds": args.rounds, "cases": rows, "post_100_views_parts_us": batch}
    harness.write("request_cpu", results, table, notes)


if __name__ == "__main__":
    main()
