"""A chaos run that reconciles every acknowledged event (``python -m bench.chaos``).

The example project runs as ``make run`` serves it, on loopback: granian (``serve()``, two
workers), a persistent private Redis for the store (AOF ``everysec`` and RDB, ``PrivateRedis(data_dir=...)``),
a throwaway private Redis for Celery's broker and results (apart, as docs/loss-budget.md advises),
a real Celery worker and beat flushing every second, and SQLite (or ``DATABASE_URL``). Steady load
runs through each phase: batches of events POSTed to the API, each event a unique canary user with
its ``ts`` (acknowledged: 202), and signed-in pages, each from a user of its own (acknowledged: 200).
Each fault of the loss budget is applied in turn while the load runs; then the load stops, the flush
drains, and three sets are compared: the acknowledged canaries, what Redis holds, what the database
holds. A canary acknowledged and missing from the database is lost; each fault names the canaries it
may lose (its budget), and a run is within budget when every lost canary is one of those and no
batch was half-written (some of its canaries kept, others not).

The Celery processes run ``tests.celery_app``, the project's app with the job lock's TTL cut to 5 s
(production's is 60 s) and a 0.3 s pause after each flush claims its first batch, so a worker killed
"mid-flush" is killed holding a claim, and the reaper hands the claim back within the phase.
Writes ``bench/results/chaos.json`` and ``.md`` (docs/loss-budget.md includes the table).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import itertools
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench import harness
from bench.slow_clients import HOST, serve
from project.redis_server import PrivateRedis, answers, free_port

ROOT = Path(__file__).resolve().parent.parent
PAGE = "/admin/login/"  # a signed-in member's 200 text/html page (the admin's form, not its index)
API_BATCH = 5  # events per POST
INTERVAL = 0.02  # seconds between one thread's requests
THREADS = 2  # of each kind
LEAD, TAIL = 1.0, 1.5  # seconds of load before a fault and after it has ended
DRAIN = 40.0  # seconds the flush may take to empty its queue after a phase
LOCK_TTL = 5  # the Celery processes' job lock TTL (seconds)
# Seconds a batch may take past its batch time to reach Redis: the batch thread waits for the GIL
# behind the requests, then sends (a shared 2-core machine; measured: up to about 0.1 s).
SEND_DELAY = 0.2
MARGIN = 0.5  # seconds around a Redis outage in which a page's batch may meet it or its back-off


# --- the reader: a Django process on the rig's configuration ------------------------------------


def _probe_main() -> None:
    """``--probe``: JSON requests on stdin, one reply a line on stdout, on the rig's environment."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.db import connection

    operations: dict[str, Callable[[dict[str, Any]], Any]] = {
        "prepare": _prepare,
        "status": _status,
        "read": _read,
        "db": lambda request: _database(request["users"]),
    }
    for line in sys.stdin:
        request = json.loads(line)
        for _attempt in (1, 2):  # a second time on a new connection: the database may have restarted
            try:
                reply = {"ok": operations[request["op"]](request)}
                break
            except Exception as error:  # reported to the bench, which decides; the probe goes on
                connection.close()
                reply = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(reply), flush=True)


def _prepare(request: dict[str, Any]) -> dict[str, Any]:
    """An API token allowed to ingest, and ``pages`` members each with a signed-in session."""
    from datetime import timedelta

    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.auth.models import Permission
    from django.contrib.sessions.backends.db import SessionStore
    from django.contrib.sessions.models import Session
    from django.utils import timezone
    from django.utils.crypto import get_random_string
    from rest_framework.authtoken.models import Token

    from activity import permissions
    from activity.services import tracking

    users = get_user_model()
    ingester, _ = users.objects.get_or_create(username="chaos-ingest")
    app, codename = permissions.INGEST.split(".")
    ingester.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    token, _ = Token.objects.get_or_create(user=ingester)
    first = users.objects.count()
    members = [users(username=f"chaos-page-{first + n}") for n in range(request["pages"])]
    for member in members:
        member.set_unusable_password()
    members = users.objects.bulk_create(members)
    store, expires = SessionStore(), timezone.now() + timedelta(days=1)
    sessions = [
        Session(
            session_key=get_random_string(32, "abcdefghijklmnopqrstuvwxyz0123456789"),
            session_data=store.encode(
                {
                    SESSION_KEY: str(member.pk),
                    BACKEND_SESSION_KEY: settings.AUTHENTICATION_BACKENDS[0],
                    HASH_SESSION_KEY: member.get_session_auth_hash(),
                }
            ),
            expire_date=expires,
        )
        for member in members
    ]
    Session.objects.bulk_create(sessions)
    return {
        "token": token.key,
        "pages": [[str(m.pk), s.session_key] for m, s in zip(members, sessions, strict=True)],
        "batch_ms": tracking.BATCH_MS,
        "backoff": tracking.FAIL_OPEN_BACKOFF,
    }


def _status(request: dict[str, Any]) -> dict[str, Any]:
    from activity.services import flush

    return flush.status().as_dict()


def _database(users: list[str]) -> dict[str, float]:
    from activity.models import UserActivity

    found: dict[str, float] = {}
    for start in range(0, len(users), 500):
        rows = UserActivity.objects.filter(user_id__in=users[start : start + 500])
        found.update((user, seen.timestamp()) for user, seen in rows.values_list("user_id", "last_seen"))
    return found


def _read(request: dict[str, Any]) -> dict[str, Any]:
    """Last seen of ``users`` in Redis (the service's own read) and in the database."""
    from activity.services import last_seen

    users = request["users"]
    held: dict[str, float | None] = {}
    for start in range(0, len(users), 1000):
        held.update(last_seen.get_many(users[start : start + 1000]))
    return {"redis": {user: ts for user, ts in held.items() if ts is not None}, "db": _database(users)}


class Probe:
    """The reader process: ``ask()`` sends one request and returns its reply."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.chaos", "--probe"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            process_group=0,
        )

    def ask(self, op: str, **request: Any) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self.process.stdin.flush()
        reply = json.loads(self.process.stdout.readline())
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["ok"]

    def stop(self) -> None:
        end(self.process)


# --- the processes ---------------------------------------------------------------------------

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


def end(process: subprocess.Popen[Any] | None, sig: int = signal.SIGTERM, wait: float = 30) -> None:
    """Stop a process started in its own process group, then whatever is left of the group."""
    if process is None:
        return
    with contextlib.suppress(ProcessLookupError):
        if process.poll() is None:
            process.send_signal(sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=wait)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (granian's workers), from /proc."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


class Rig:
    """Every process of the run, started by ``start()`` and all stopped by ``stop()``."""

    def __init__(
        self, tmp: Path, lifetime: int | None = None, database_url: str | None = None, postgres: bool = False
    ) -> None:
        self.tmp = tmp
        self.postgres = PrivatePostgres() if postgres else None
        self.database_url = self.postgres.url if self.postgres else database_url or f"sqlite:///{tmp / 'db.sqlite3'}"
        self.store = PrivateRedis(data_dir=tmp / "redis")
        self.broker = PrivateRedis()
        self.port = free_port()
        self.lifetime = lifetime
        self.web: subprocess.Popen[bytes] | None = None
        self.worker: subprocess.Popen[bytes] | None = None
        self.beat: subprocess.Popen[bytes] | None = None
        self.probe: Probe | None = None
        self.workers_started = 0

    @property
    def env(self) -> dict[str, str]:
        env = {
            "DATABASE_URL": self.database_url,
            "REDIS_URL": self.store.url,
            "ACTIVITY_REDIS_CLUSTER": "",  # the rig's store is a standalone server, whatever runs it
            "CELERY_BROKER_URL": self.broker.url,
            "CELERY_RESULT_BACKEND": self.broker.url,
            "ACTIVITY_FLUSH_INTERVAL": "1",
            "WEB_CONCURRENCY": "2",
            "ACTIVITY_TEST_CONSTANTS": json.dumps({"activity.services.locks.JOB_LOCK_TTL": LOCK_TTL}),
            "ACTIVITY_TEST_PAUSE_AFTER_CLAIM": "1",
            "ACTIVITY_TEST_PAUSE_SECONDS": "0.3",
        }
        if self.lifetime:
            env["GRANIAN_WORKERS_LIFETIME"] = str(self.lifetime)
        return env

    def start(self) -> Rig:
        if self.postgres is not None:
            self.postgres.start()
        self.store.start()
        self.broker.start()
        self.web = serve(self.tmp, self.store.url, self.port, self.env)  # migrates, then serves
        self.probe = Probe({**os.environ, **self.env})
        self.start_worker()
        self.beat = self._celery("beat", ["beat", "-l", "info", "-s", str(self.tmp / "beat-schedule")])
        return self

    def _celery(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with (self.tmp / f"{name}.log").open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "tests.celery_app", *args],
                cwd=ROOT,
                env={**os.environ, **self.env},
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
            )

    def start_worker(self) -> None:
        self.workers_started += 1
        name = f"worker{self.workers_started}"
        args = ["worker", "--pool=prefork", "-c", "1", "-n", f"{name}@%h", "-l", "info", "--without-gossip"]
        self.worker = self._celery(name, [*args, "--without-mingle", "--without-heartbeat"])

    def worker_log(self) -> str:
        return (self.tmp / f"worker{self.workers_started}.log").read_text(errors="replace")

    def web_log(self) -> str:
        return (self.tmp / "granian.log").read_text(errors="replace")

    def wait_store(self, timeout: float = 30) -> float:
        """Block until the store answers (its data loaded); the time it did."""
        deadline = time.monotonic() + timeout
        while not answers(self.store.url, timeout=0.2):
            if time.monotonic() > deadline:
                raise RuntimeError("the store did not come back")
            time.sleep(0.02)
        return time.time()

    def drain(self) -> float:
        """Wait until the flush has written every change (its queue empty); seconds it took."""
        assert self.probe is not None
        started = time.monotonic()
        while True:
            with contextlib.suppress(RuntimeError):  # the store or database still away
                if self.probe.ask("status")["backlog"] == 0:
                    return time.monotonic() - started
            if time.monotonic() - started > DRAIN:
                raise RuntimeError(f"the flush did not drain in {DRAIN:g} s; see {self.tmp}/worker*.log")
            time.sleep(0.25)

    def stop(self) -> None:
        for process in (self.beat, self.worker):
            end(process, wait=10)
        if self.probe is not None:
            self.probe.stop()
        end(self.web)
        self.broker.stop()
        self.store.stop()
        if self.postgres is not None:
            self.postgres.stop()


@contextlib.contextmanager
def rig(lifetime: int | None = None, database_url: str | None = None, postgres: bool = False) -> Iterator[Rig]:
    """A started rig in a temporary directory (SQLite there unless ``database_url``, or a private
    PostgreSQL), stopped at exit, whatever happened."""
    with tempfile.TemporaryDirectory(prefix="activity-chaos-") as name:
        running = Rig(Path(name), lifetime, database_url, postgres)
        try:
            yield running.start()
        finally:
            running.stop()


# --- the load --------------------------------------------------------------------------------


@dataclass
class Sent:
    """One request of the load: its canaries, when it went and came back, and its answer."""

    kind: str  # "api" or "page"
    canaries: tuple[str, ...]
    ts: float  # the events' ts (API), or when the page was asked for
    answered: float = 0.0
    status: int | None = None  # None: no answer (the connection failed or timed out)

    @property
    def acknowledged(self) -> bool:
        return self.status == (202 if self.kind == "api" else 200)


_canary = itertools.count()


@dataclass
class Load:
    """``THREADS`` threads POSTing event batches and as many asking for signed-in pages."""

    port: int
    token: str
    pages: deque[tuple[str, str]]
    sent: list[Sent] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        for target in [self._api] * THREADS + [self._page] * THREADS:
            thread = threading.Thread(target=self._loop, args=(target,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> list[Sent]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)
        return self.sent

    def _loop(self, target: Callable[[http.client.HTTPConnection], Sent | None]) -> None:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=5)
        while not self._stop.is_set():
            one = target(connection)
            if one is None:
                return
            if one.status is None:
                connection.close()
                connection = http.client.HTTPConnection(HOST, self.port, timeout=5)
            self.sent.append(one)
            time.sleep(INTERVAL)
        connection.close()

    def _ask(self, connection: http.client.HTTPConnection, one: Sent, method: str, path: str, **kw: Any) -> Sent:
        try:
            connection.request(method, path, **kw)
            answer = connection.getresponse()
            answer.read()
            one.status = answer.status
        except (OSError, http.client.HTTPException):
            one.status = None
        one.answered = time.time()
        return one

    def _api(self, connection: http.client.HTTPConnection) -> Sent:
        now = round(time.time(), 3)
        one = Sent("api", tuple(f"chaos-{next(_canary)}" for _ in range(API_BATCH)), now)
        body = json.dumps({"events": [{"user": user, "ts": now} for user in one.canaries]})
        headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json"}
        return self._ask(connection, one, "POST", "/api/v1/events/", body=body, headers=headers)

    def _page(self, connection: http.client.HTTPConnection) -> Sent | None:
        try:
            user, session = self.pages.popleft()
        except IndexError:
            return None  # every prepared member has been used: no more pages this run
        one = Sent("page", (user,), time.time())
        return self._ask(connection, one, "GET", PAGE, headers={"Cookie": f"sessionid={session}"})


# --- the faults ------------------------------------------------------------------------------


@dataclass
class Marks:
    """What a fault noted while it ran: its start and end (epoch seconds), and what it may lose."""

    began: float
    ended: float
    allowed: Callable[[list[Sent]], set[str]] = lambda sent: set()
    note: str = ""


@dataclass
class Context:
    rig: Rig
    consts: dict[str, Any]
    acked_so_far: Callable[[], list[Sent]]


def pages_between(sent: list[Sent], start: float, stop: float) -> set[str]:
    return {
        c
        for one in sent
        if one.kind == "page" and one.acknowledged and start <= one.answered <= stop
        for c in one.canaries
    }


def outage(ctx: Context, down: float, up: float) -> Callable[[list[Sent]], set[str]]:
    """Pages whose batch met Redis away or the back-off that follows (the middleware fails open)."""
    batch = ctx.consts["batch_ms"] / 1000
    return lambda sent: pages_between(sent, down - batch - MARGIN, up + ctx.consts["backoff"] + MARGIN)


def kill_store(ctx: Context) -> Marks:
    """SIGKILL redis-server (AOF everysec), start it again on its directory 1 s later."""
    store = ctx.rig.store
    down = time.time()
    store.kill()
    time.sleep(1)
    store.restart()
    up = ctx.rig.wait_store()
    pages = outage(ctx, down, up)

    def allowed(sent: list[Sent]) -> set[str]:
        # Redis's bound for everysec: what it acknowledged in the last ~2 s (a delayed fsync).
        recent = {
            c
            for one in sent
            if one.kind == "api" and one.acknowledged and down - 2 <= one.answered <= down
            for c in one.canaries
        }
        return pages(sent) | recent

    return Marks(down, up, allowed, f"down {up - down:.1f} s")


def shutdown_store(ctx: Context) -> Marks:
    """SHUTDOWN (SIGTERM: the AOF fsynced, a last RDB snapshot), started again 1 s later."""
    store = ctx.rig.store
    down = time.time()
    store.stop()
    time.sleep(1)
    store.start()
    up = ctx.rig.wait_store()
    return Marks(down, up, outage(ctx, down, up), f"down {up - down:.1f} s")


def forget_store(ctx: Context) -> Marks:
    """Redis without persistence: SIGKILL and started again on an empty directory. What the
    database did not hold at that moment is what it may lose."""
    store = ctx.rig.store
    assert ctx.rig.probe is not None
    time.sleep(2)  # flushes have run under this phase's load: part of it is in the database
    before = [one for one in ctx.acked_so_far() if one.acknowledged]
    flushed = set(ctx.rig.probe.ask("db", users=[c for one in before for c in one.canaries]))
    down = time.time()
    store.kill()
    store.stop()  # lets go of the directory
    for path in store.dir.iterdir():
        if path.name != "private-redis.lock":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    time.sleep(1)
    store.start()
    up = ctx.rig.wait_store()
    pages = outage(ctx, down, up)

    def allowed(sent: list[Sent]) -> set[str]:
        # Written before the kill: sent before Redis was back (an answer may arrive after the kill).
        unflushed = {c for one in sent if one.acknowledged and one.ts <= up for c in one.canaries} - flushed
        return unflushed | pages(sent)

    return Marks(down, up, allowed, f"down {up - down:.1f} s; {len(flushed)} flushed before")


def fill_store(ctx: Context) -> Marks:
    """``maxmemory`` below what Redis uses, ``noeviction``: every write refused (OOM) for 2 s."""
    raw = redis.Redis.from_url(ctx.rig.store.url)
    try:
        used = int(raw.info("memory")["used_memory"])
        raw.config_set("maxmemory-policy", "noeviction")
        down = time.time()
        raw.config_set("maxmemory", used // 2)
        time.sleep(2)
        raw.config_set("maxmemory", 0)
        up = time.time()
    finally:
        raw.close()
    return Marks(down, up, outage(ctx, down, up), f"refused writes for {up - down:.1f} s")


def wait_log(read: Callable[[], str], done: Callable[[str], bool], timeout: float, what: str) -> None:
    """Poll a process's log until ``done`` says so."""
    deadline = time.monotonic() + timeout
    while not done(read()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def reload_web(ctx: Context) -> Marks:
    """SIGHUP to granian's main process: it starts new workers and stops the old ones, one by one."""
    web = ctx.rig.web
    assert web is not None
    stopped = ctx.rig.web_log().count("Stopped old worker")
    began = time.time()
    web.send_signal(signal.SIGHUP)
    wait_log(ctx.rig.web_log, lambda log: log.count("Stopped old worker") >= stopped + 2, 30, "granian's reload")
    return Marks(began, time.time(), note="both workers replaced")


def recycle_web(ctx: Context) -> Marks:
    """Wait for granian to recycle its workers at the end of their lifetime (``--workers-lifetime``):
    at least one worker's lifetime expired, and every old worker stopped."""
    expired = ctx.rig.web_log().count("lifetime expired")
    began = time.time()

    def recycled(log: str) -> bool:
        return log.count("lifetime expired") > expired and log.count("Stopped old worker") >= log.count(
            "lifetime expired"
        )

    wait_log(ctx.rig.web_log, recycled, 2 * (ctx.rig.lifetime or 60) + 10, "a worker's lifetime to end")
    count = ctx.rig.web_log().count("lifetime expired") - expired
    return Marks(began, time.time(), note=f"{count} worker(s) recycled, waited {time.time() - began:.0f} s")


def kill_web_worker(ctx: Context) -> Marks:
    """SIGKILL one granian worker (granian starts another: ``--respawn-failed-workers``)."""
    assert ctx.rig.web is not None
    victim = children(ctx.rig.web.pid)[0]
    killed = time.time()
    os.kill(victim, signal.SIGKILL)
    time.sleep(1)
    window = ctx.consts["batch_ms"] / 1000 + SEND_DELAY
    return Marks(killed, killed, lambda sent: pages_between(sent, killed - window, killed), "one of two workers")


def wait_for_claim(rig: Rig) -> None:
    """Until the worker's next flush has claimed a batch (it pauses 0.3 s then, holding it)."""
    line = "test pause after claiming batch 1"
    seen = rig.worker_log().count(line)
    wait_log(rig.worker_log, lambda log: log.count(line) > seen, 15, "a flush to claim a batch")


def kill_celery_worker(ctx: Context) -> Marks:
    """SIGKILL the Celery worker (its process group) while its flush holds a claim; start another."""
    rig = ctx.rig
    wait_for_claim(rig)
    killed = time.time()
    end(rig.worker, signal.SIGKILL)
    rig.start_worker()
    return Marks(killed, time.time(), note="killed holding its claim")


def restart_database(ctx: Context) -> Marks:
    """PostgreSQL stopped as by a crash (``immediate``) while a flush holds its claim, started 1 s later."""
    rig = ctx.rig
    assert rig.postgres is not None
    wait_for_claim(rig)
    failed = rig.worker_log().count("OperationalError")
    down = time.time()
    rig.postgres.halt("immediate")
    time.sleep(1)
    rig.postgres.start()
    up = time.time()
    write_failed = rig.worker_log().count("OperationalError") > failed
    return Marks(down, up, note=f"down {up - down:.1f} s; the flush's write failed: {'yes' if write_failed else 'no'}")


def stop_broker(ctx: Context) -> Marks:
    """SIGKILL the broker's Redis; started again (empty) 3 s later."""
    broker = ctx.rig.broker
    down = time.time()
    broker.kill()
    time.sleep(3)
    broker.restart()
    return Marks(down, time.time(), note="broker away 3 s")


@dataclass(frozen=True)
class Fault:
    name: str
    apply: Callable[[Context], Marks]
    budget: str


AWAY = "pages: Redis away + back-off"
FAULTS = {
    "redis-sigkill": Fault(
        "Redis SIGKILL, AOF everysec", kill_store, f"API: acknowledged in Redis's last 2 s (everysec); {AWAY}"
    ),
    "redis-restart": Fault("Redis SHUTDOWN and restart", shutdown_store, f"API: 0; {AWAY}"),
    "redis-no-persistence": Fault(
        "Redis restart, persistence off", forget_store, f"all: what the database did not hold yet; {AWAY}"
    ),
    "redis-oom": Fault("Redis OOM, noeviction", fill_store, "API: 0 (refused: 503); pages: Redis refusing + back-off"),
    "granian-hup": Fault("granian graceful reload (SIGHUP)", reload_web, "0"),
    "granian-lifetime": Fault("granian worker recycled (workers lifetime)", recycle_web, "0"),
    "web-worker-sigkill": Fault(
        "web worker SIGKILL", kill_web_worker, "pages answered in the last `BATCH_MS` + 0.2 s before the kill"
    ),
    "celery-sigkill": Fault("Celery worker SIGKILL mid-flush", kill_celery_worker, "0"),
    "broker-down": Fault("Celery broker down", stop_broker, "0"),
    "postgres-restart": Fault("PostgreSQL restarted during a flush", restart_database, "0"),
}
SHORT = ("redis-sigkill", "granian-hup", "celery-sigkill")
# The recycle comes when granian's first lifetime tick (60 s after its start) is near, before the
# reload and the kill have replaced its workers with younger ones.
FULL = (
    "redis-sigkill",
    "redis-restart",
    "redis-no-persistence",
    "redis-oom",
    "celery-sigkill",
    "granian-lifetime",
    "granian-hup",
    "web-worker-sigkill",
    "broker-down",
)


# --- a phase and its reconciliation ------------------------------------------------------------


@dataclass
class Phase:
    fault: str
    name: str
    budget: str
    acknowledged_api: int
    acknowledged_pages: int
    refused: int  # requests answered otherwise (503...) or not at all
    missing_in_redis: int  # acknowledged, not in Redis after the phase
    lost: list[str]  # acknowledged, not in the database after the flush
    lost_pages: int  # of which pages
    allowed: int  # canaries the fault may lose
    beyond_budget: list[str]  # lost and not allowed
    half_written: int  # batches some of whose canaries were kept, others not
    refused_but_kept: int  # batches answered otherwise whose canaries were all kept
    lost_at: list[float]  # when each lost canary was acknowledged, seconds after the fault began
    drain_s: float
    seconds: float
    note: str

    @property
    def within_budget(self) -> bool:
        return not self.beyond_budget and self.half_written == 0

    def summary(self) -> dict[str, Any]:
        found = {k: v for k, v in self.__dict__.items() if k not in ("lost", "beyond_budget")}
        return {**found, "lost": len(self.lost), "beyond_budget": self.beyond_budget[:20], "within": self.within_budget}


def run_phase(rig: Rig, key: str, consts: dict[str, Any], token: str, pages: deque[tuple[str, str]]) -> Phase:
    """Load, the fault, more load; then the flush drains and the three sets are compared."""
    assert rig.probe is not None
    fault = FAULTS[key]
    load = Load(rig.port, token, pages).start()
    started = time.monotonic()
    try:
        time.sleep(LEAD)
        marks = fault.apply(Context(rig, consts, lambda: list(load.sent)))
        time.sleep(TAIL)
    finally:
        sent = load.stop()
    seconds = time.monotonic() - started
    drained = rig.drain()
    # The next phase starts once the web workers' tracking has resumed after this fault's back-off.
    time.sleep(max(0.0, marks.ended + consts["backoff"] + MARGIN - time.time()))
    everyone = [c for one in sent for c in one.canaries]
    held = rig.probe.ask("read", users=everyone)
    in_redis, in_db = held["redis"], held["db"]
    acked = [one for one in sent if one.acknowledged]
    canaries = {c: one for one in acked for c in one.canaries}
    kept = {c for c, one in canaries.items() if c in in_db and (one.kind == "page" or in_db[c] >= one.ts - 0.001)}
    lost = sorted(set(canaries) - kept)
    allowed = marks.allowed(sent)
    half = refused_kept = 0
    for one in sent:
        if one.kind != "api":
            continue
        present = sum(c in in_db for c in one.canaries)
        half += 0 < present < len(one.canaries)
        refused_kept += not one.acknowledged and present == len(one.canaries)
    return Phase(
        fault=key,
        name=fault.name,
        budget=fault.budget,
        acknowledged_api=sum(len(one.canaries) for one in acked if one.kind == "api"),
        acknowledged_pages=sum(1 for one in acked if one.kind == "page"),
        refused=len(sent) - len(acked),
        missing_in_redis=sum(c not in in_redis for c in canaries),
        lost=lost,
        lost_pages=sum(canaries[c].kind == "page" for c in lost),
        allowed=len(allowed & set(canaries)),
        beyond_budget=sorted(set(lost) - allowed),
        half_written=half,
        refused_but_kept=refused_kept,
        lost_at=sorted(round(canaries[c].answered - marks.began, 3) for c in lost)[:50],
        drain_s=round(drained, 1),
        seconds=round(seconds, 1),
        note=marks.note,
    )


def chaos(
    faults: tuple[str, ...],
    pages_per_phase: int = 1000,
    lifetime: int | None = None,
    database_url: str | None = None,
    postgres: bool = False,
) -> list[Phase]:
    """Run ``faults`` in turn on one rig; each phase's reconciliation."""
    with rig(lifetime, database_url, postgres) as running:
        assert running.probe is not None
        prepared = running.probe.ask("prepare", pages=pages_per_phase * len(faults))
        consts = {"batch_ms": prepared["batch_ms"], "backoff": prepared["backoff"]}
        pages = deque((user, session) for user, session in prepared["pages"])
        phases = []
        for key in faults:
            phase = run_phase(running, key, consts, prepared["token"], pages)
            print(
                f"[chaos] {phase.name}: {phase.acknowledged_api} events + {phase.acknowledged_pages} pages "
                f"acknowledged, {len(phase.lost)} lost ({phase.allowed} allowed), "
                f"{'within' if phase.within_budget else 'BEYOND'} budget; {phase.note}",
                flush=True,
            )
            phases.append(phase)
        return phases


def table(phases: list[Phase]) -> list[list[str]]:
    rows = [
        [
            "fault",
            "acknowledged (events + pages)",
            "not acknowledged",
            "lost (events + pages)",
            "budget",
            "within budget",
        ]
    ]
    for p in phases:
        lost = f"{len(p.lost) - p.lost_pages:,} + {p.lost_pages:,}" + (
            f" (half-written batches: {p.half_written})" if p.half_written else ""
        )
        rows.append(
            [
                p.name,
                f"{p.acknowledged_api:,} + {p.acknowledged_pages:,}",
                f"{p.refused:,}",
                lost,
                f"{p.allowed:,}" if p.budget == "0" else f"{p.allowed:,} ({p.budget})",
                "yes" if p.within_budget else "**no**",
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--short", action="store_true", help=f"only {', '.join(SHORT)} (the suite's run)")
    parser.add_argument("--only", help=f"comma-separated faults of {', '.join(FAULTS)}")
    parser.add_argument("--sqlite", action="store_true", help="SQLite even where a private PostgreSQL could start")
    args = parser.parse_args()
    if args.probe:
        _probe_main()
        return
    faults = tuple(args.only.split(",")) if args.only else SHORT if args.short else FULL
    database_url = os.environ.get("DATABASE_URL")
    postgres = not database_url and not args.sqlite and PrivatePostgres.available()
    if postgres and not args.only and not args.short:
        faults += ("postgres-restart",)
    started = time.monotonic()
    # The workers' lifetime ends about when the phases before the recycle have run.
    lifetime = 60 if "granian-lifetime" in faults else None
    phases = chaos(faults, lifetime=lifetime, database_url=database_url, postgres=postgres)
    elapsed = time.monotonic() - started
    if postgres:
        database = "a private PostgreSQL 15"
    else:
        database = "PostgreSQL" if (database_url or "").startswith("postgres") else "SQLite"
    notes = (
        f"One run of `python -m bench.chaos` ({elapsed:.0f} s), on loopback: granian (2 workers) as `make run` "
        f"serves it, a persistent private Redis (AOF everysec, RDB), the broker on a Redis of its own, a real "
        f"Celery worker and beat flushing every second, {database}. Load in each phase: {THREADS} threads POSTing "
        f"batches of {API_BATCH} events (each event a canary user of its own; acknowledged: 202) and {THREADS} "
        f"asking for a signed-in page (each a member of its own; acknowledged: 200), a request every "
        f"{INTERVAL * 1000:.0f} ms each; {LEAD:g} s before the fault, {TAIL:g} s after it ended. Not "
        "acknowledged: the API's 503s while Redis refused, and the few requests whose keep-alive connection a "
        "stopping web worker closed. Lost: acknowledged and not in the database once the flush has drained. "
        "Budget: how many of the phase's canaries the fault may lose, and which ones; within budget: every "
        "lost canary is one of them, and no batch was half-written. Redis away + back-off: pages answered "
        f"from a batch time and {MARGIN:g} s before the fault until {MARGIN:g} s after the tracking back-off "
        "(`FAIL_OPEN_BACKOFF`, 5 s) that follows Redis answering again: the middleware fails open, dropping "
        "and counting what Redis refused. The Celery processes run with a 5 s job lock (production: 60 s), "
        "each flush pausing 0.3 s after its first claim, so a kill or a database restart lands mid-flush."
    )
    results = {"seconds": round(elapsed, 1), "database": database, "phases": [p.summary() for p in phases]}
    harness.write("chaos", results, table(phases), notes)


if __name__ == "__main__":
    main()
