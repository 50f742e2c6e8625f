"""A cluster pipeline's shares sent to their nodes at once (the store's ``ClusterPipeline``: the calling
thread sends one node's share, a pool's threads the others) against one node after the other,
side by side in one run.

``python -m bench.cluster_wave``: a private 3-master Redis Cluster; pipelines of INCRs spread evenly
over the three primaries, 1 and 100 a node, sent by 1 caller and by 4 caller threads, through the
service's ``ClusterClient``. The sequential variant is the same ``ClusterPipeline`` with its pool
replaced by one that runs each share in the calling thread, so the two differ only in that. A
pipeline of the same size to one node is the floor (one round trip, no fan-out). The servers are on
loopback; a network's round trip is added by a connection that waits ``--rtt`` after each send
(a pipeline's one write), as a thread waits for a reply across a network: 0 (loopback alone),
0.2 ms (one data centre) and 1 ms. Interleaved rounds (``harness.interleaved``); reported:
pipelines per second and the ratios at once / one after another and at once / one node.

Writes bench/results/cluster_wave.json and .md.
"""

from __future__ import annotations

import argparse
import functools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from unittest import mock

from redis.connection import Connection

from bench import harness
from project.redis_server import PrivateCluster

CALLERS = (1, 4)
PER_NODE = (1, 100)
RTTS_MS = (0.0, 0.2, 1.0)


class FarConnection(Connection):
    """A connection whose every send waits ``rtt`` seconds more for its replies: a network's round trip."""

    rtt = 0.0

    def send_packed_command(self, command, check_health: bool = True) -> None:
        super().send_packed_command(command, check_health)
        time.sleep(self.rtt)


class InCallerThread(Executor):
    """An executor that runs each call at once in the calling thread: the shares one after the other."""

    def submit(self, fn: Callable, /, *args: object, **kwargs: object) -> Future:
        future: Future = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def keys_per_node(client, count: int) -> list[list[str]]:
    """``count`` keys on each primary (found by their slots' owners), one list per primary."""
    names = [node.name for node in client.get_primaries()]
    found: dict[str, list[str]] = {name: [] for name in names}
    n = 0
    while min(len(keys) for keys in found.values()) < count:
        key = f"bench:wave:{n}"
        owner = found[client.get_node_from_key(key).name]
        if len(owner) < count:
            owner.append(key)
        n += 1
    return [found[name] for name in names]


def callers(threads: int, pipelines: int, send: Callable[[], None]) -> Callable[[], None]:
    """``pipelines`` sends shared out among ``threads`` caller threads (the calling thread alone for 1)."""

    def run() -> None:
        if threads == 1:
            for _ in range(pipelines):
                send()
            return
        workers = [
            threading.Thread(target=lambda: [send() for _ in range(pipelines // threads)]) for _ in range(threads)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    return run


def send(client, keys: list[str]) -> None:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.incr(key)
    pipe.execute()


def one_after_another(run: Callable[[], None]) -> Callable[[], None]:
    """``run`` with the store's pool of senders replaced by ``InCallerThread``."""
    from activity.store import client as store_client

    def patched() -> None:
        with mock.patch.object(store_client, "_senders", lambda pid: InCallerThread()):
            run()

    return patched


def run(url: str, rounds: int, pipelines: int) -> dict[str, dict[str, float]]:
    from activity.store.client import ClusterClient, client_options

    client = ClusterClient.from_url(
        url, require_full_coverage=False, connection_class=FarConnection, **client_options(10.0)
    )
    found: dict[str, dict[str, float]] = {}
    for rtt_ms in RTTS_MS:
        FarConnection.rtt = rtt_ms / 1000
        for per_node in PER_NODE:
            spread = [key for keys in zip(*keys_per_node(client, per_node), strict=True) for key in keys]
            alone = keys_per_node(client, len(spread))[0]  # as many keys, all on one primary
            for threads in CALLERS:
                at_once = callers(threads, pipelines, functools.partial(send, client, spread))
                rates = harness.interleaved(
                    {
                        "at_once": (at_once, pipelines),
                        "one_after_another": (one_after_another(at_once), pipelines),
                        "one_node": (callers(threads, pipelines, functools.partial(send, client, alone)), pipelines),
                    },
                    rounds,
                )
                found[f"{rtt_ms}_ms_{per_node}_per_node_{threads}_callers"] = {
                    "rtt_ms": rtt_ms,
                    "per_node": per_node,
                    "callers": threads,
                    **{f"{name}_per_s": rate for name, rate in rates.items()},
                    "at_once_over_one_after_another": rates["at_once"] / rates["one_after_another"],
                    "at_once_over_one_node": rates["at_once"] / rates["one_node"],
                }
    client.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pipelines", type=int, default=200, help="pipelines per variant and round")
    options = parser.parse_args()
    with PrivateCluster() as cluster:
        os.environ.update(REDIS_URL=cluster.url, ACTIVITY_REDIS_CLUSTER="1", ACTIVITY_KEY_PREFIX="bench:")
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
        import django

        django.setup()
        found = run(cluster.url, options.rounds, options.pipelines)
    table = [
        [
            "round trip, commands a node, callers",
            "at once /s",
            "one after another /s",
            "one node /s",
            "at once / after",
            "at once / one node",
        ]
    ]
    for row in found.values():
        table.append(
            [
                f"{row['rtt_ms']} ms, {row['per_node']}, {row['callers']}",
                f"{row['at_once_per_s']:,.0f}",
                f"{row['one_after_another_per_s']:,.0f}",
                f"{row['one_node_per_s']:,.0f}",
                f"{row['at_once_over_one_after_another']:.2f}x",
                f"{row['at_once_over_one_node']:.2f}x",
            ]
        )
    notes = (
        "Pipelines per second (medians of interleaved rounds) on a private 3-master cluster on loopback, the "
        "round trip column's wait added after each send. At once: the store's ClusterPipeline (the calling "
        "thread and the pool's); one after another: the same code with each share sent in the calling thread; "
        "one node: a pipeline as long to one primary."
    )
    harness.write("cluster_wave", {"rounds": options.rounds, "pipelines": options.pipelines, **found}, table, notes)


if __name__ == "__main__":
    main()
