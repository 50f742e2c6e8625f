"""The service over HTTP under the production server, driven by wrk (``python -m bench.http``).

One run starts granian as ``make run`` does (``project/serving.py``; 4 workers) on a free loopback
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
  so every request moves those users' last seen),
- ``GET /api/v1/users/<u>/last-seen/`` and ``GET /api/v1/online/`` (one page of 10,000 online users).

It prints requests/s, events/s, p50 and p99 and each case's ratio to the floor, checks them against
the issue's targets (each ratio with a 90% interval for its median, so a target is called met or
missed only when the run's noise cannot move it across its line), and each case's CPU per request
by who spends it: the server's processes (user space, kernel), Redis and wrk. The two cores are
saturated, so a case's rate is the machine's CPU over its CPU per request, and that table says which
part of a request a ratio is made of. It writes ``bench/results/http.json`` and ``http.md``.
``--with-gunicorn`` also runs every case against gunicorn (gthread, the same workers, one thread each:
the server ``make run`` used before granian), interleaved with granian's: what the slow-client
defence costs (docs/serving.md). wrk is Debian's ``wrk`` package (``apt-get install
wrk``); its script is ``bench/http_wrk.lua``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

from bench import harness
from project.redis_server import PrivateRedis, free_port
from project.serving import APPLICATION, granian_command

ROOT = Path(__file__).resolve().parent.parent
WRK_SCRIPT = Path(__file__).resolve().parent / "http_wrk.lua"
HOST = "127.0.0.1"
FLOOR_PATH = "/bench/floor/"
PAGE_PATH = "/bench/page/"
DRF_PATH = "/bench/drf/"
FLOOR_READ_PATH, DRF_READ_PATH = FLOOR_PATH + "read/", DRF_PATH + "read/"  # untracked: under the floors' prefixes
EXCLUDED = "/static/,/media/,/healthz,/favicon.ico," + FLOOR_PATH + "," + DRF_PATH
ONLINE_USERS = 10_000
READ_USER = "s1"  # one of them (seed_online): GET last-seen and the reads ask for it
UNLIMITED = "100000000/min"
API_CASES = ("post_", "last_seen", "online")  # read against DRF's floor too
READS = ("floor_read", "drf_read")  # the floors after one Redis read, nothing else


# Page requests speak as a browser: wrk and urllib send no or a library's user agent, which the
# service counts as a bot (no visitor, no page view). API clients keep theirs: token requests are
# machine traffic, as in production.
BROWSER = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"}


@dataclass
class Case:
    """One wrk run: a request (method, URL, headers, body) and the events each request carries."""

    key: str
    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    method: str = "GET"
    events: int = 0
    body: Path | None = None


@dataclass
class Sample:
    rate: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_us: dict[str, float] | None = None  # CPU per request by party (PARTIES), when measured


# Who spends the machine's CPU during a run: the server's processes in user space and in the kernel
# (its workers' tracking threads included), redis-server, and wrk.
PARTIES = ("server_user", "server_kernel", "redis", "wrk")


@dataclass
class CpuMeter:
    """CPU seconds so far of each of PARTIES, read between runs: the server's process group from
    ``/proc`` (Linux), Redis from its INFO, wrk from this process's reaped children."""

    group: int  # the server's process group (it runs in a session of its own)
    redis: Any  # a client of the private redis-server

    def read(self) -> dict[str, float]:
        tick = os.sysconf("SC_CLK_TCK")
        user = kernel = 0
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # a process that ended meanwhile
                continue
            if int(fields[2]) == self.group:  # fields: state, ppid, pgrp, ..., utime (11), stime (12)
                user, kernel = user + int(fields[11]), kernel + int(fields[12])
        info, children = self.redis.info("cpu"), os.times()
        return {
            "server_user": user / tick,
            "server_kernel": kernel / tick,
            "redis": info["used_cpu_user"] + info["used_cpu_sys"],
            "wrk": children.children_user + children.children_system,
        }


@dataclass
class Server:
    """A server under test on its own port, started in its own process group (stopped whole)."""

    name: str
    command: list[str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, log: Path) -> None:
        env = {**os.environ, "HOST": HOST, "PORT": str(self.port)}
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                self.command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 60
        while not answers(self.base + FLOOR_PATH):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not start; its log:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        except ProcessLookupError:
            pass


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def granian_server(name: str, workers: int, application: str = APPLICATION) -> Server:
    """granian as ``make run`` starts it, serving ``application``."""
    server = Server(name, [])
    env = {"HOST": HOST, "PORT": str(server.port), "WEB_CONCURRENCY": str(workers)}
    server.command = granian_command(sys.executable, env, application)
    return server


def servers(workers: int, with_gunicorn: bool) -> list[Server]:
    """granian as ``make run`` starts it; gunicorn with the same processes, one thread each, if asked."""
    found = [granian_server("granian", workers)]
    if with_gunicorn:
        gunicorn = Server("gunicorn", [])
        options = ["--worker-class", "gthread", "--workers", str(workers), "--threads", "1", "--keep-alive", "5"]
        options += ["--reuse-port", "--bind", f"{HOST}:{gunicorn.port}"]
        gunicorn.command = [sys.executable, "-m", "gunicorn", *options, "project.wsgi:application"]
        found.append(gunicorn)
    return found


def configure(tmp: Path, redis_url: str) -> None:
    """Environment shared by this process (Django, for the set-up) and the servers it starts."""
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "bench.http_settings",
            "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
            "REDIS_URL": redis_url,
            "ACTIVITY_KEY_PREFIX": "act:",
            "ACTIVITY_TRACK_EXCLUDE_PATHS": EXCLUDED,
            "ACTIVITY_THROTTLE_RATES": json.dumps({"user": UNLIMITED, "ingest": UNLIMITED}),
        }
    )


def prepare_database() -> dict[str, str]:
    """Migrate, then make the clients' credentials: a staff token, a member's session cookie."""
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.test import Client
    from rest_framework.authtoken.models import Token

    call_command("migrate", verbosity=0)
    users = get_user_model().objects
    staff = users.create_superuser("bench-staff", "bench-staff@example.com", None)  # every permission
    browser = Client()
    browser.force_login(users.create_user("bench-member"))
    return {
        "token": Token.objects.create(user=staff).key,
        "session": f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}",
    }


def seed_online() -> None:
    """10,000 users seen now, so the online page and last seen read real data."""
    from activity import clock
    from activity.events import Event
    from activity.services import ingest

    for start in range(0, ONLINE_USERS, 1000):
        ingest.record_events([Event(f"s{n}", clock.now()) for n in range(start, start + 1000)])


def visitor_cookie(base: str) -> str:
    """The visitor cookie the service hands an anonymous browser on its first page."""
    from activity.web import middleware

    first_page = urllib.request.Request(base + PAGE_PATH, headers=BROWSER)
    with urllib.request.urlopen(first_page, timeout=5) as reply:
        cookie = SimpleCookie()
        for header in reply.headers.get_all("Set-Cookie") or []:
            cookie.load(header)
    name = middleware.VISITOR_COOKIE_NAME
    return f"{name}={cookie[name].value}"


def cases(base: str, tmp: Path, credentials: dict[str, str], visitor: str) -> list[Case]:
    token = {"Authorization": f"Token {credentials['token']}"}
    session = {"Cookie": credentials["session"], **BROWSER}
    posts = []
    for count in (1, 100, 1000):
        body = tmp / f"events-{count}.json"
        body.write_text(json.dumps({"events": [{"user": f"u{n}"} for n in range(count)]}))
        name = f"POST /api/v1/events/, {count:,} event{'s' if count > 1 else ''}"
        url = base + "/api/v1/events/"
        posts.append(Case(f"post_{count}", name, url, token, method="POST", events=count, body=body))
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


def run_wrk(case: Case, seconds: int, connections: int, meter: CpuMeter | None = None) -> Sample:
    """One wrk run of ``case``; with ``meter``, also each party's CPU per request during it."""
    before = meter.read() if meter else None
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s", "-s", str(WRK_SCRIPT)]
    for name, value in case.headers.items():
        command += ["-H", f"{name}: {value}"]
    command += [case.url, "--", case.method] + ([str(case.body)] if case.body else [])
    done = subprocess.run(command, capture_output=True, text=True)
    line = next((line for line in done.stdout.splitlines() if line.startswith("WRK_JSON ")), None)
    if done.returncode or line is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
    found = json.loads(line.removeprefix("WRK_JSON "))
    errors = sum(found[k] for k in ("connect_errors", "read_errors", "write_errors", "timeouts", "bad_status"))
    cpu_us = None
    if meter and before and found["requests"]:
        after = meter.read()
        cpu_us = {party: (after[party] - before[party]) / found["requests"] * 1e6 for party in PARTIES}
    return Sample(
        rate=found["requests"] / (found["duration_us"] / 1e6),
        p50_ms=found["p50_us"] / 1000,
        p99_ms=found["p99_us"] / 1000,
        errors=errors,
        cpu_us=cpu_us,
    )


# The floors each case is read against. A case runs right after fresh runs of its floors, so each
# ratio compares runs seconds apart: this machine's neighbours change its speed by 2x within a minute.
REFERENCES = {
    "floor_signed_in": ("floor",),
    "drf_floor": ("floor",),
    "floor_read": ("floor",),
    "drf_read": ("floor", "drf_floor"),
    "page_anonymous": ("floor",),
    "page_signed_in": ("floor", "floor_signed_in"),
}
API_REFERENCES = ("floor", "drf_floor")
LAST_SEEN_TARGET = 0.70  # issue 15, against the floor

Samples = dict[str, list[Sample]]
Ratios = dict[tuple[str, str], list[float]]


def references(key: str) -> tuple[str, ...]:
    return REFERENCES.get(key, API_REFERENCES if key.startswith(API_CASES) else ())


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


def median_ratio(a: list[Sample], b: list[Sample]) -> float:
    """The median of the per-run ratios of rates: each pair ran in the same place in the schedule."""
    return statistics.median(x.rate / y.rate for x, y in zip(a, b, strict=True))


def summarize(all_cases: list[Case], samples: Samples, ratios: Ratios) -> dict[str, dict[str, Any]]:
    """Each case's medians over all its runs (CPU per party included), and the median of its ratios
    to each of its floors with a 90% interval for it."""
    rows = {}
    for case in all_cases:
        runs = samples[case.key]
        rate = statistics.median(s.rate for s in runs)
        p50, p99 = statistics.median(s.p50_ms for s in runs), statistics.median(s.p99_ms for s in runs)
        tails = [s.p99_ms / s.p50_ms for s in runs]  # each run's, like the rates' ratios
        versus = {ref: statistics.median(ratios[(case.key, ref)]) for ref in references(case.key)}
        interval = {ref: harness.median_interval(ratios[(case.key, ref)]) for ref in references(case.key)}
        metered = [s.cpu_us for s in runs if s.cpu_us]
        cpu = {party: statistics.median(m[party] for m in metered) for party in PARTIES} if metered else None
        rows[case.key] = {
            "case": case.name,
            "requests_per_s": rate,
            "events_per_s": rate * case.events if case.events else None,
            "p50_ms": p50,
            "p99_ms": p99,
            "p99_over_p50": statistics.median(tails),
            "p99_over_p50_interval_90": [round(bound, 3) for bound in harness.median_interval(tails)],
            "vs_floor": versus.get("floor", 1.0),
            "vs_signed_in_floor": versus.get("floor_signed_in"),
            "vs_drf_floor": versus.get("drf_floor"),
            "interval_90": {ref: [round(low, 3), round(high, 3)] for ref, (low, high) in interval.items()},
            "cpu_us_per_request": cpu,
            "requests_per_s_each_run": [round(s.rate, 1) for s in runs],
        }
    return rows


def targets(rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets against this run's figures; a ratio's also against its 90% interval
    (``harness.median_interval``): clear of the run's noise only when the whole interval is on one
    side (for the tails, every case's interval: the table shows the one reaching highest)."""

    def ratio(name: str, key: str, ref: str, bound: float) -> dict[str, Any]:
        measured = rows[key]["vs_signed_in_floor" if ref == "floor_signed_in" else "vs_floor"]
        low, high = rows[key]["interval_90"][ref]
        verdict = "met" if low >= bound else "not met" if high < bound else "within the noise"
        return {
            "target": name,
            "measured": measured,
            "met": measured >= bound,
            "unit": "x",
            "interval_90": [low, high],
            "interval_verdict": verdict,
        }

    batch = max(("post_100", "post_1000"), key=lambda key: rows[key]["events_per_s"])
    events = rows[batch]["events_per_s"]
    result = [
        ratio("POST 1 event >= 0.60x floor", "post_1", "floor", 0.60),
        ratio("tracked page >= 0.90x untracked, anonymous", "page_anonymous", "floor", 0.90),
        ratio("tracked page >= 0.90x untracked, signed in", "page_signed_in", "floor_signed_in", 0.90),
        {
            "target": f"batched ingest >= 60,000 events/s ({rows[batch]['case'][22:]})",
            "measured": events,
            "met": events >= 60_000,
            "unit": "",
        },
        ratio(f"GET last-seen >= {LAST_SEEN_TARGET:.2f}x floor", "last_seen", "floor", LAST_SEEN_TARGET),
    ]
    over = [row["case"] for row in rows.values() if row["p99_over_p50"] > 3]
    worst = max(row["p99_over_p50"] for row in rows.values())
    widest = max(rows.values(), key=lambda row: row["p99_over_p50_interval_90"][1])  # the one that decides
    low, high = widest["p99_over_p50_interval_90"]
    any_over = any(row["p99_over_p50_interval_90"][0] > 3 for row in rows.values())
    label = f"p99 <= 3x p50 in every case ({len(over)} of {len(rows)} over{': ' + '; '.join(over) if over else ''})"
    result.append(
        {
            "target": label,
            "measured": worst,
            "met": not over,
            "unit": "x",
            "interval_90": [low, high],
            "interval_case": widest["case"],
            "interval_verdict": "met" if high <= 3 else "not met" if any_over else "within the noise",
        }
    )
    return result


def ceilings(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the stack allows an API read, against the floor: one Redis read in the bare view, the same
    in the bare DRF view (no API view that reads Redis can answer faster), and GET last-seen; and
    whether GET last-seen's target lies above the ceiling's whole 90% interval (then DRF and the one
    round trip alone answer slower than the target asks, before any of the service's own steps)."""
    shown = {key: rows[key] for key in (*READS, "last_seen")}
    ceiling = shown["drf_read"]["interval_90"]["floor"]
    return {
        "rows": [
            {"case": row["case"], "vs_floor": row["vs_floor"], "interval_90": row["interval_90"]["floor"]}
            for row in shown.values()
        ],
        "last_seen_of_ceiling": shown["last_seen"]["vs_floor"] / shown["drf_read"]["vs_floor"],
        "target_above_ceiling": ceiling[1] < LAST_SEEN_TARGET,
    }


def compare(
    reference: dict[str, list[Sample]], other: dict[str, list[Sample]], rows: dict[str, dict[str, Any]]
) -> dict[str, dict[str, float]]:
    """Another server's rate per case, as a multiple of the reference server's."""
    return {
        key: {
            "requests_per_s": statistics.median(s.rate for s in other[key]),
            "p99_ms": statistics.median(s.p99_ms for s in other[key]),
            "vs_reference": median_ratio(other[key], reference[key]),
            "reference_requests_per_s": rows[key]["requests_per_s"],
        }
        for key in reference
    }


def fmt(value: float | None, digits: int = 0) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def markdown(table: list[list[str]]) -> str:
    lines = ["| " + " | ".join(table[0]) + " |", "|" + "---|" * len(table[0])]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in table[1:]])


def cpu_table(rows: dict[str, dict[str, Any]]) -> list[list[str]] | None:
    """Each case's CPU microseconds per request by party, their total, and that total over the floor's."""
    if any(row["cpu_us_per_request"] is None for row in rows.values()):
        return None
    table = [
        ["case", "server, user us", "server, kernel us", "Redis us", "wrk us", "total us", "vs floor's", "cores busy"]
    ]
    floor = sum(rows["floor"]["cpu_us_per_request"].values())
    for row in rows.values():
        cpu = row["cpu_us_per_request"]
        total = sum(cpu.values())
        busy = total * row["requests_per_s"] / 1e6
        parties = [fmt(cpu[party]) for party in PARTIES]
        table.append([row["case"], *parties, fmt(total), f"{total / floor:.2f}x", f"{busy:.2f}"])
    return table


def report(rows: dict[str, dict[str, Any]], results: dict[str, Any]) -> None:
    table = [["case", "req/s", "events/s", "p50 ms", "p99 ms", "p99/p50", "vs floor"]]
    for key, row in rows.items():
        ratio = f"{row['vs_floor']:.2f}x"
        if key == "page_signed_in":
            ratio += f" ({row['vs_signed_in_floor']:.2f}x signed-in floor)"
        if row["vs_drf_floor"] is not None:
            ratio += f" ({row['vs_drf_floor']:.2f}x DRF floor)"
        table.append(
            [
                row["case"],
                fmt(row["requests_per_s"]),
                fmt(row["events_per_s"]),
                fmt(row["p50_ms"], 1),
                fmt(row["p99_ms"], 1),
                f"{row['p99_over_p50']:.1f}",
                ratio,
            ]
        )
    goals = [["target (issue 15)", "measured", "met", "90% interval of the median", "by the interval"]]
    for goal in results["targets"]:
        measured = f"{goal['measured']:.2f}x" if goal["unit"] == "x" else fmt(goal["measured"])
        interval = "{:.2f}x-{:.2f}x".format(*goal["interval_90"]) if "interval_90" in goal else ""
        if "interval_case" in goal:
            interval += f" ({goal['interval_case']})"
        verdict = goal.get("interval_verdict", "")
        goals.append([goal["target"], measured, "yes" if goal["met"] else "no", interval, verdict])
    allowed = [["what the stack allows an API read", "vs floor", "90% interval of the median"]]
    for row in results["ceilings"]["rows"]:
        allowed.append([row["case"], f"{row['vs_floor']:.2f}x", "{:.2f}x-{:.2f}x".format(*row["interval_90"])])
    above = results["ceilings"]["target_above_ceiling"]
    cpu = cpu_table(rows)
    commands = ", ".join(f"{key} {per:.1f}" for key, per in results["redis_commands_per_request"].items())
    notes = (
        f"granian (ASGI, `project/serving.py`), {results['workers']} workers, DEBUG off, SQLite, private "
        f"redis-server; wrk with 1 thread and {results['connections']} connections on loopback, "
        f"{results['seconds']} s per run, medians of {results['rounds']} interleaved rounds (wrk and the server "
        "share the machine's cores). Each case runs right after its floors, and a ratio is the median of those "
        "adjacent pairs' ratios (the machine's speed drifts by 2x within a minute); p99/p50 is the median of each "
        "run's. A median's 90% interval is read from the order statistics of its runs' values, whatever their "
        "distribution: a target is met or not beyond the run's noise only when the whole interval is on one side of "
        "its line. Ingest events carry a user and no "
        "time (the server stamps it, so every request moves last seen). Redis commands run per request (inside "
        f"scripts included): {commands}. Command: `python -m bench.http{results['flags']}`.\n\n" + markdown(goals)
    )
    notes += (
        "\n\nThe reads (the floors after one Redis read through the service, the ZSCORE GET last-seen makes, and "
        "nothing else) show what the stack itself allows: the bare DRF view with that read is the ceiling of any API "
        f"view that reads Redis. GET last-seen reaches {results['ceilings']['last_seen_of_ceiling']:.2f}x of it; "
        f"its target, {LAST_SEEN_TARGET:.2f}x the floor, is "
        + (
            "above the ceiling's whole interval: DRF and one Redis read alone answer slower than that on this "
            "machine, before any authentication, permission, throttle or tracking."
            if above
            else "within or below the ceiling's interval."
        )
        + "\n\n"
        + markdown(allowed)
    )
    if cpu:
        notes += (
            "\n\nWhere each request's CPU goes (medians over the case's runs): the server's processes in user space "
            "and in the kernel (the workers' tracking threads included), redis-server, and wrk; read from /proc, "
            "Redis's INFO and wrk's rusage around each run. The cores busy are the total times the rate: the 2 cores "
            "are saturated, so a case's rate follows its CPU per request.\n\n" + markdown(cpu)
        )
    if "gunicorn" in results:
        versus = [["case", "granian req/s", "gunicorn req/s", "granian / gunicorn", "gunicorn p99 ms"]]
        for key, row in results["gunicorn"].items():
            versus.append(
                [
                    rows[key]["case"],
                    fmt(row["reference_requests_per_s"]),
                    fmt(row["requests_per_s"]),
                    f"{1 / row['vs_reference']:.2f}x",
                    fmt(row["p99_ms"], 1),
                ]
            )
        notes += (
            f"\n\ngunicorn {results['gunicorn_version']} (gthread, the same workers, 1 thread each: "
            "`make run`'s server before granian), interleaved with the runs above (`--with-gunicorn`). "
            "A ratio over 1 is granian faster; granian's slow-client defence is what the ratio buys:\n\n"
            + markdown(versus)
        )
    harness.write("http", results, table, notes)


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
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--with-gunicorn", action="store_true", help="also run each case against gunicorn")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is missing: apt-get install wrk")
    if args.with_gunicorn and importlib.util.find_spec("gunicorn") is None:
        sys.exit("gunicorn is missing: .venv/bin/pip install -r requirements-dev.txt")
    under_test = servers(args.workers, args.with_gunicorn)
    with tempfile.TemporaryDirectory(prefix="activity-http-bench-") as name, PrivateRedis() as redis_server:
        tmp = Path(name)
        configure(tmp, redis_server.url)
        credentials = prepare_database()
        seed_online()
        try:
            for server in under_test:
                server.start(tmp / f"{server.name}.log")
            visitor = visitor_cookie(under_test[0].base)
            plan = {server.name: cases(server.base, tmp, credentials, visitor) for server in under_test}
            per_request = check_tracking(plan["granian"])
            from activity.store.client import get_client

            meters = {server.name: CpuMeter(server.process.pid, get_client()) for server in under_test}
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
        "flags": " --with-gunicorn" if args.with_gunicorn else "",
        "redis_commands_per_request": per_request,
        "cases": rows,
        "targets": targets(rows),
        "ceilings": ceilings(rows),
    }
    if args.with_gunicorn:
        from importlib.metadata import version

        results["gunicorn_version"] = version("gunicorn")
        results["gunicorn"] = compare(samples["granian"], samples["gunicorn"], rows)
    report(rows, results)


if __name__ == "__main__":
    main()
