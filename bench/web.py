"""The service as the HTTP benches serve it (``bench.http``, ``bench.servers``, ``bench.gc_pauses``,
``bench.request_cpu``): its settings (``bench.http_settings``, ``bench.http_urls``: the floors beside
the service's own URLs), a private SQLite database with a staff token and a member's session, the
servers under test each in a process group of its own, and wrk driving them
(``bench/http_wrk.lua``), with the CPU each party spends per request."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

from project.redis_server import free_port
from project.serving import APPLICATION, granian_command

ROOT = Path(__file__).resolve().parent.parent
WRK_SCRIPT = Path(__file__).resolve().parent / "http_wrk.lua"
HOST = "127.0.0.1"
FLOOR_PATH = "/bench/floor/"
PAGE_PATH = "/bench/page/"
DRF_PATH = "/bench/drf/"
EXCLUDED = "/static/,/media/,/healthz,/favicon.ico," + FLOOR_PATH + "," + DRF_PATH
ONLINE_USERS = 10_000
READ_USER = "s1"  # one of them (seed_online): GET last-seen and the reads ask for it
UNLIMITED = "100000000/min"


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


def processes() -> Iterator[tuple[Path, list[str]]]:
    """Each process's ``/proc`` folder and the fields of its ``stat`` after its name (Linux): state,
    ppid, pgrp, ..., utime (11), stime (12)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                yield entry, (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # a process that ended meanwhile
                continue


@dataclass
class CpuMeter:
    """CPU seconds so far of each of PARTIES, read between runs: the server's process group from
    ``/proc`` (Linux), Redis from its INFO, wrk from this process's reaped children."""

    group: int  # the server's process group (it runs in a session of its own)
    redis: Any  # a client of the private redis-server

    def read(self) -> dict[str, float]:
        tick = os.sysconf("SC_CLK_TCK")
        user = kernel = 0
        for _, fields in processes():
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
    cwd: Path = ROOT  # the checkout it serves
    env: dict[str, str] = field(default_factory=dict)  # over this process's environment

    @property
    def base(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, log: Path) -> None:
        env = {**os.environ, **self.env, "HOST": HOST, "PORT": str(self.port)}
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                self.command, cwd=self.cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
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


def page_view_batch(count: int) -> dict[str, list[dict[str, str]]]:
    """An ingest body of ``count`` page views, one per user, over 20 paths, with no ts (the server
    stamps them): the page-view batch ``bench.http`` and ``bench.request_cpu`` post."""
    return {"events": [{"user": f"u{n}", "path": f"/p/{n % 20}"} for n in range(count)]}


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def granian_server(
    name: str, workers: int, application: str = APPLICATION, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> Server:
    """granian as ``make run`` starts it, serving ``application`` of the checkout ``cwd``."""
    server = Server(name, [], cwd=cwd, env=env or {})
    env = {"HOST": HOST, "PORT": str(server.port), "WEB_CONCURRENCY": str(workers)}
    server.command = granian_command(sys.executable, env, application)
    return server


def gunicorn_server(workers: int) -> Server:
    """gunicorn gthread with ``workers`` processes of one thread each: ``make run``'s server before granian."""
    server = Server("gunicorn", [])
    options = ["--worker-class", "gthread", "--workers", str(workers), "--threads", "1", "--keep-alive", "5"]
    options += ["--reuse-port", "--bind", f"{HOST}:{server.port}"]
    server.command = [sys.executable, "-m", "gunicorn", *options, "project.wsgi:application"]
    return server


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
    """10,000 users seen now, so the online page and last seen read real data (this process's store;
    ``bench.http`` seeds each server through its API: ``seed_online_through_api``)."""
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
