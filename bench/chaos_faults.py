"""The chaos run's faults (``bench.chaos``): each applied to the rig under load, noting when it
began and ended and which canaries it may lose (``Marks``), and the table of them (``FAULTS``,
``SHORT``, ``FULL``). Apart from the phases that run them and reconcile what they lost."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from bench import chaos_retries
from bench.chaos_load import Sent
from bench.chaos_rig import Rig
from bench.harness import children, end, wait_log

# Seconds a batch may take past its batch time to reach Redis: the batch thread waits for the GIL
# behind the requests, then sends (a shared 2-core machine; measured: up to about 0.1 s).
SEND_DELAY = 0.2
MARGIN = 0.5  # seconds around a Redis outage in which a page's batch may meet it or its back-off


@dataclass
class Marks:
    """What a fault noted while it ran: its start and end (epoch seconds), and what it may lose."""

    began: float
    ended: float
    allowed: Callable[[list[Sent]], set[str]] = lambda sent: set()
    note: str = ""
    retries: dict[str, Any] = field(default_factory=dict)  # bench.chaos_retries's figures


@dataclass
class Context:
    rig: Rig
    consts: dict[str, Any]
    acked_so_far: Callable[[], list[Sent]]


def acknowledged_between(sent: list[Sent], kind: str, start: float, stop: float) -> set[str]:
    """The canaries of ``kind`` ("page" or "api") acknowledged from ``start`` to ``stop``."""
    return {
        c
        for one in sent
        if one.kind == kind and one.acknowledged and start <= one.answered <= stop
        for c in one.canaries
    }


def outage(ctx: Context, down: float, up: float) -> Callable[[list[Sent]], set[str]]:
    """Pages whose batch met Redis away or the back-off that follows (the middleware fails open)."""
    batch = ctx.consts["batch_ms"] / 1000
    return lambda sent: acknowledged_between(sent, "page", down - batch - MARGIN, up + ctx.consts["backoff"] + MARGIN)


def bounce_store(ctx: Context, stop: Callable[[], None], start: Callable[[], object]) -> tuple[float, float]:
    """``stop`` the store, ``start`` it 1 s later; (when it went down, when it answered again)."""
    down = time.time()
    stop()
    time.sleep(1)
    start()
    return down, ctx.rig.wait_store()


def kill_store(ctx: Context) -> Marks:
    """SIGKILL redis-server (AOF everysec), start it again on its directory 1 s later."""
    down, up = bounce_store(ctx, ctx.rig.store.kill, ctx.rig.store.restart)
    pages = outage(ctx, down, up)

    def allowed(sent: list[Sent]) -> set[str]:
        # Redis's bound for everysec: what it acknowledged in the last ~2 s (a delayed fsync).
        return pages(sent) | acknowledged_between(sent, "api", down - 2, down)

    return Marks(down, up, allowed, f"down {up - down:.1f} s")


def shutdown_store(ctx: Context) -> Marks:
    """SHUTDOWN (SIGTERM: the AOF fsynced, a last RDB snapshot), started again 1 s later."""
    down, up = bounce_store(ctx, ctx.rig.store.stop, ctx.rig.store.start)
    return Marks(down, up, outage(ctx, down, up), f"down {up - down:.1f} s")


def forget_store(ctx: Context) -> Marks:
    """Redis without persistence: SIGKILL and started again on an empty directory. What the
    database did not hold at that moment is what it may lose."""
    store = ctx.rig.store
    assert ctx.rig.probe is not None
    time.sleep(2)  # flushes have run under this phase's load: part of it is in the database
    before = [one for one in ctx.acked_so_far() if one.acknowledged]
    flushed = set(ctx.rig.probe.ask("db", users=[c for one in before for c in one.canaries]))

    def kill_and_empty() -> None:
        store.kill()
        store.stop()  # lets go of the directory
        for path in store.dir.iterdir():
            if path.name != "private-redis.lock":
                shutil.rmtree(path) if path.is_dir() else path.unlink()

    down, up = bounce_store(ctx, kill_and_empty, store.start)
    pages = outage(ctx, down, up)

    def allowed(sent: list[Sent]) -> set[str]:
        # Written before the kill: sent before Redis was back (an answer may arrive after the kill).
        unflushed = {c for one in sent if one.acknowledged and one.ts <= up for c in one.canaries} - flushed
        return unflushed | pages(sent)

    return Marks(down, up, allowed, f"down {up - down:.1f} s; {len(flushed)} flushed before")


def stall_store(ctx: Context) -> Marks:
    """DEBUG SLEEP for 2 s (beyond every client's timeout) while a flush holds a claim: requests time
    out, the flush's lock requests among them, and Redis runs them all once awake."""
    wait_for_claim(ctx.rig)
    raw = redis.Redis.from_url(ctx.rig.store.url)
    down = time.time()
    raw.execute_command("DEBUG", "SLEEP", 2)
    up = time.time()
    raw.close()
    return Marks(down, up, outage(ctx, down, up), f"stalled {up - down:.1f} s")


def stall_with_retries(ctx: Context) -> Marks:
    """Redis stalled mid-ingest while clients retry every 503 and 409 (``bench.chaos_retries``)."""
    rig, began = ctx.rig, time.time()
    assert rig.probe is not None
    found = chaos_retries.stall_with_retries(rig.store.url, rig.port, ctx.consts["token"], rig.probe.ask)
    ended = time.time()
    return Marks(began, ended, outage(ctx, began, ended), f"retried {ended - began:.1f} s", found)


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


def reload_web(ctx: Context) -> Marks:
    """SIGHUP to granian's main process: it starts new workers and stops the old ones, one by one."""
    web = ctx.rig.web
    assert web is not None
    stopped = ctx.rig.web_log().count("Stopped old worker")
    began = time.time()
    web.send_signal(signal.SIGHUP)
    wait_log(ctx.rig.web_log, lambda log: log.count("Stopped old worker") >= stopped + 2, 60, "granian's reload")
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
    return Marks(
        killed, killed, lambda sent: acknowledged_between(sent, "page", killed - window, killed), "one of two workers"
    )


def wait_for_claim(rig: Rig) -> None:
    """Until the worker's next flush has claimed a batch (it pauses 0.3 s then, holding it)."""
    line = "test pause after claiming batch 1"
    seen = rig.worker_log().count(line)
    wait_log(rig.worker_log, lambda log: log.count(line) > seen, 15, "a flush to claim a batch")


def kill_celery_worker(ctx: Context) -> Marks:
    """SIGKILL the Celery worker (its process group) while its flush holds a claim; the fault ends
    when another one is ready."""
    rig = ctx.rig
    wait_for_claim(rig)
    killed = time.time()
    end(rig.worker, signal.SIGKILL)
    rig.start_worker()
    wait_log(rig.worker_log, lambda log: " ready." in log, 60, "the new worker")
    ready = time.time()
    return Marks(killed, ready, note=f"killed holding its claim; another ready {ready - killed:.1f} s later")


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
    "redis-stall": Fault(
        "Redis stalled (DEBUG SLEEP 2 s)", stall_store, "API: 0 (timed out: 503); pages: Redis stalled + back-off"
    ),
    "redis-stall-retries": Fault(
        "Redis stalled, clients retrying (DEBUG SLEEP, CLIENT PAUSE WRITE)",
        stall_with_retries,
        "API: 0 (timed out: 503); pages: Redis stalled + back-off",
    ),
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
    "redis-stall",
    "redis-stall-retries",
    "celery-sigkill",
    "granian-lifetime",
    "granian-hup",
    "web-worker-sigkill",
    "broker-down",
)
