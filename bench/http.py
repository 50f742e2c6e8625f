"""The service over HTTP under the production server, driven by wrk (``python -m bench.http``).

One run starts granian as ``make run`` does (``project/serving.py``; a worker per CPU) on a free loopback
port, against a private redis-server and a SQLite file in a temporary directory, and
measures side by side, in interleaved rounds (each case right after fresh runs of the floors it is
read against; each case's median kept), with 32 connections:

- the floor: a bare Django view behind the same server and middleware, tracking nothing (its path
  is in ``ACTIVITY_TRACK_EXCLUDE_PATHS``), anonymous and signed in,
- DRF's floor: a bare DRF view (no authentication, permission, throttle or Redis; not tracked), so
  the API cases can be read against what the framework alone costs,
- the two floors again after one Redis read through the service (the ZSCORE GET last-seen makes):
  what one round trip costs a page, and the ceiling of any API view that reads Redis on this stack
  (the framework and one round trip, none of the service's authentication, throttle or tracking),
- the same view tracked: an anonymous visitor sending its visitor cookie back, a signed-in user,
- ``POST /api/v1/events/`` with 1, 100 and 1,000 events (token auth; the server stamps the time,
  so every request moves those users' last seen), and with 100 page views (a path each),
- ``GET /api/v1/users/<u>/last-seen/`` and ``GET /api/v1/online/`` (one page of 10,000 online users).

It prints requests/s, events/s, p50 and p99 and each case's ratio to the floor, checks them against
the issue's targets (each ratio with a 90% interval for its median, so a target is called met or
missed only when the run's noise cannot move it across its line), and each case's CPU per request
by who spends it: the server's processes (user space, kernel), Redis and wrk. Where the cores are
saturated, a case's rate is the machine's CPU over its CPU per request, and that table says which
part of a request a ratio is made of. It writes ``bench/results/http.json`` and ``http.md``
(``bench.http_report`` reads the runs and writes them).
``--with-gunicorn`` also runs every case against gunicorn (gthread, the same workers, one thread each:
the server ``make run`` used before granian, which needs a buffering proxy in front), interleaved with
granian's (docs/serving.md). ``--against DIR`` also runs every case, interleaved the same way, against
the service of another checkout (a git worktree of an earlier commit, run with this checkout's
bench files and virtualenv) with its own redis-server, each server seeding its online users through
its own API: a before-and-after of the code, side by side in one run. wrk is Debian's ``wrk`` package (``apt-get install
wrk``); its script is ``bench/http_wrk.lua``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import redis

from bench.http_report import (
    READS,
    Ratios,
    Samples,
    ceilings,
    compare,
    references,
    report,
    summarize,
    targets,
)
from bench.web import (
    BROWSER,
    DRF_PATH,
    FLOOR_PATH,
    ONLINE_USERS,
    PAGE_PATH,
    READ_USER,
    Case,
    CpuMeter,
    Sample,
    configure,
    granian_server,
    gunicorn_server,
    page_view_batch,
    prepare_database,
    run_wrk,
    visitor_cookie,
)
from project.redis_server import PrivateRedis
from project.serving import default_workers

FLOOR_READ_PATH, DRF_READ_PATH = FLOOR_PATH + "read/", DRF_PATH + "read/"  # untracked: under the floors' prefixes


def cases(base: str, tmp: Path, credentials: dict[str, str], visitor: str) -> list[Case]:
    token = {"Authorization": f"Token {credentials['token']}"}
    session = {"Cookie": credentials["session"], **BROWSER}
    posts, url = [], base + "/api/v1/events/"
    for count in (1, 100, 1000):
        body = tmp / f"events-{count}.json"
        body.write_text(json.dumps({"events": [{"user": f"u{n}"} for n in range(count)]}))
        name = f"POST /api/v1/events/, {count:,} event{'s' if count > 1 else ''}"
        posts.append(Case(f"post_{count}", name, url, token, method="POST", events=count, body=body))
    views = tmp / "page-views-100.json"
    views.write_text(json.dumps(page_view_batch(100)))
    name = "POST /api/v1/events/, 100 page views"
    posts.append(Case("post_100_views", name, url, token, method="POST", events=100, body=views))
    return [
        Case("floor", "floor: bare view, anonymous, not tracked", base + FLOOR_PATH, BROWSER),
        Case("floor_signed_in", "bare view, signed in, not tracked", base + FLOOR_PATH, session),
        Case("drf_floor", "bare DRF view: no auth, permission, throttle or Redis", base + DRF_PATH, token),
        Case("floor_read", "bare view + one Redis read, anonymous, not tracked", base + FLOOR_READ_PATH, BROWSER),
        Case(
            "drf_read", "bare DRF view + one Redis read: no auth, permission or throttle", base + DRF_READ_PATH, token
        ),
        Case(
            "page_anonymous",
            "same view tracked, anonymous visitor (cookie)",
            base + PAGE_PATH,
            {"Cookie": visitor, **BROWSER},
        ),
        Case("page_signed_in", "same view tracked, signed in (session)", base + PAGE_PATH, session),
        *posts,
        Case("last_seen", "GET /api/v1/users/<u>/last-seen/", base + f"/api/v1/users/{READ_USER}/last-seen/", token),
        Case("online", "GET /api/v1/online/ (one page)", base + "/api/v1/online/", token),
    ]


def seed_online_through_api(base: str, token: str) -> None:
    """ONLINE_USERS users seen now, through the server's ingest API, so the online page and last seen
    read real data in the layout of the code it runs."""
    for start in range(0, ONLINE_USERS, 1000):
        body = json.dumps({"events": [{"user": f"s{n}"} for n in range(start, start + 1000)]}).encode()
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        request = urllib.request.Request(base + "/api/v1/events/", data=body, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=60):
            pass  # a status other than 2xx raises


def redis_commands_per_request(case: Case, count: int = 20) -> float:
    """Commands Redis ran per request of ``case`` (those inside scripts included): proves that the
    floors track nothing and the tracked pages do."""
    from activity.store.client import get_client

    client = get_client()

    def settled() -> int:
        """Commands run but our INFOs and the connections' own (redis-py's HELLO and health-check
        PING, sent when a worker first connects), once that stops changing: what wrk left in flight,
        and the tracking batches the servers' threads send up to tracking.BATCH_MS later, are
        done."""
        found = None
        while True:
            info = client.info("stats", "commandstats")
            ours = sum(info.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("info", "hello", "ping"))
            count = info["total_commands_processed"] - ours
            if count == found:
                return count
            found = count
            time.sleep(0.2)

    before = settled()
    for _ in range(count):
        request = urllib.request.Request(case.url, headers=case.headers, method=case.method)
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read()
    return (settled() - before) / count


def check_tracking(all_cases: list[Case]) -> dict[str, float]:
    """Redis commands per request of the page cases; raises unless the floors cost none, the reads
    exactly their one, and the tracked pages some (else the ratios would compare the wrong things)."""
    pages = ("floor", "floor_signed_in", "drf_floor", *READS, "page_anonymous", "page_signed_in")
    found = {case.key: redis_commands_per_request(case) for case in all_cases if case.key in pages}
    if (
        max(found["floor"], found["floor_signed_in"], found["drf_floor"]) >= 0.5
        or any(abs(found[key] - 1) >= 0.5 for key in READS)
        or min(found["page_anonymous"], found["page_signed_in"]) < 1
    ):
        raise RuntimeError(f"the floors must track nothing, the reads read once and the tracked pages track: {found}")
    return found


def measure(
    plan: dict[str, list[Case]], rounds: int, seconds: int, connections: int, meters: dict[str, CpuMeter]
) -> tuple[dict[str, Samples], dict[str, Ratios]]:
    """Interleaved rounds after one second of each case (every worker imports its code, opens
    connections). In a round each case runs, on each server in turn, right after its floors
    (``REFERENCES``): the samples of every run (with each party's CPU, ``meters``), and each case's
    rate over its floor's just before."""
    names = list(plan)
    for name in names:
        for case in plan[name]:
            run_wrk(case, 1, connections)
    samples = {name: {case.key: [] for case in plan[name]} for name in names}
    ratios: dict[str, Ratios] = {name: {} for name in names}
    by_key = {name: {case.key: case for case in plan[name]} for name in names}

    def run(name: str, case: Case) -> Sample:
        sample = run_wrk(case, seconds, connections, meters.get(name))
        if sample.errors:
            raise RuntimeError(f"{name}, {case.name}: {sample.errors} failed requests (non-2xx or socket)")
        samples[name][case.key].append(sample)
        return sample

    for number in range(rounds):
        for index in range(len(plan[names[0]])):
            for name in names:
                case = plan[name][index]
                floors = {ref: run(name, by_key[name][ref]).rate for ref in references(case.key)}
                if floors:
                    rate = run(name, case).rate
                    for ref, floor_rate in floors.items():
                        ratios[name].setdefault((case.key, ref), []).append(rate / floor_rate)
        print(f"round {number + 1}/{rounds} done", flush=True)
    return samples, ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=2, help="per run of a case")
    parser.add_argument(
        "--rounds",
        type=int,
        default=21,
        help="interleaved rounds (about 65 s each): 21 narrow each median's 90%% interval to its 7th to 15th "
        "run, so the ratios near their lines get a verdict; 9 is a quicker, noisier run",
    )
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=default_workers(), help="make run's default: one per CPU")
    parser.add_argument("--with-gunicorn", action="store_true", help="also run each case against gunicorn")
    parser.add_argument("--against", type=Path, help="also run each case against the service of this checkout")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is missing: apt-get install wrk")
    if args.with_gunicorn and importlib.util.find_spec("gunicorn") is None:
        sys.exit("gunicorn is missing: .venv/bin/pip install -r requirements-dev.txt")
    under_test = [granian_server("granian", args.workers)] + (
        [gunicorn_server(args.workers)] if args.with_gunicorn else []
    )
    with tempfile.TemporaryDirectory(prefix="activity-http-bench-") as name, ExitStack() as stack:
        stores = {"granian": stack.enter_context(PrivateRedis())}
        tmp = Path(name)
        configure(tmp, stores["granian"].url)
        if args.against:
            stores["against"] = stack.enter_context(PrivateRedis())
            env = {"REDIS_URL": stores["against"].url}
            under_test.append(granian_server("against", args.workers, cwd=args.against.resolve(), env=env))
        credentials = prepare_database()
        try:
            for server in under_test:
                server.start(tmp / f"{server.name}.log")
                seed_online_through_api(server.base, credentials["token"])
            plan = {
                server.name: cases(server.base, tmp, credentials, visitor_cookie(server.base)) for server in under_test
            }
            per_request = check_tracking(plan["granian"])
            clients = {name: stack.enter_context(redis.Redis.from_url(store.url)) for name, store in stores.items()}
            meters = {
                server.name: CpuMeter(server.process.pid, clients.get(server.name, clients["granian"]))
                for server in under_test
            }
            samples, ratios = measure(plan, args.rounds, args.seconds, args.connections, meters)
        finally:
            for server in under_test:
                server.stop()
    rows = summarize(plan["granian"], samples["granian"], ratios["granian"])
    results: dict[str, Any] = {
        "server": "granian",
        "workers": args.workers,
        "connections": args.connections,
        "seconds": args.seconds,
        "rounds": args.rounds,
        "flags": (" --with-gunicorn" if args.with_gunicorn else "")
        + (f" --against {args.against}" if args.against else ""),
        "redis_commands_per_request": per_request,
        "cases": rows,
        "targets": targets(rows),
        "ceilings": ceilings(rows),
    }
    if args.with_gunicorn:
        from importlib.metadata import version

        results["gunicorn_version"] = version("gunicorn")
        results["gunicorn"] = compare(samples["granian"], samples["gunicorn"], rows)
    if args.against:
        revision = ["git", "-C", str(args.against), "rev-parse", "--short", "HEAD"]
        results["against_commit"] = subprocess.run(revision, capture_output=True, text=True, check=True).stdout.strip()
        results["against"] = compare(samples["granian"], samples["against"], rows)
    report(rows, results)


if __name__ == "__main__":
    main()
