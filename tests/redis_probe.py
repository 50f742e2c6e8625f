"""Counting what reaches Redis: server-side command calls and read events, client-side sends."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import redis
from redis.cluster import RedisCluster
from redis.connection import AbstractConnection

from activity.store.client import ClusterPipeline
from tests.redis_counts import command_calls


@dataclass
class Probe:
    commands: Counter = field(default_factory=Counter)  # INFO commandstats delta (INFO left out)
    server_reads: int = 0  # INFO stats total_reads_processed delta, minus the probe's own INFO
    client_sends: int = 0  # network writes by any redis-py connection of this process


@contextmanager
def counting_sends(count: Callable[[], None]) -> Iterator[None]:
    """Call ``count`` for every request this process sends to Redis: each network write, except
    that a cluster pipeline's writes to its nodes (all sent before any reply is read) count once,
    as the one round trip they cost."""
    send, wave = AbstractConnection.send_packed_command, ClusterPipeline._send
    in_wave = False

    def counting_send(self, command, check_health=True):
        if not in_wave:
            count()
        return send(self, command, check_health)

    def counting_wave(self, *args, **kwargs):
        nonlocal in_wave
        count()
        in_wave = True
        try:
            return wave(self, *args, **kwargs)
        finally:
            in_wave = False

    AbstractConnection.send_packed_command = counting_send
    ClusterPipeline._send = counting_wave
    try:
        yield
    finally:
        AbstractConnection.send_packed_command = send
        ClusterPipeline._send = wave


def _reads(client: redis.Redis | RedisCluster) -> list[int]:
    """Read events each server processed so far (every primary of a cluster)."""
    if isinstance(client, RedisCluster):
        stats = client.info("stats", target_nodes=RedisCluster.PRIMARIES)
        return [stats[name]["total_reads_processed"] for name in sorted(stats)]
    return [client.info("stats")["total_reads_processed"]]


@contextmanager
def probe(client: redis.Redis | RedisCluster) -> Iterator[Probe]:
    """Measure what the block sends. Needs a server no one else uses (the run's private Redis).

    A pipeline is one send and, for a request-sized pipeline, one read event on the server: the
    two together show the round trips a block costs, whatever commands travel in them. On a
    cluster ``server_reads`` is the most any one primary processed (a pipeline reads once on each
    node it reaches).
    """
    result = Probe()

    def count() -> None:
        result.client_sends += 1

    before_calls = command_calls(client)
    before_reads = _reads(client)
    with counting_sends(count):
        yield result
    after_reads = _reads(client)
    after_calls = command_calls(client)
    # The second INFO stats counts its own read.
    result.server_reads = max(after - before - 1 for after, before in zip(after_reads, before_reads, strict=True))
    result.commands = after_calls - before_calls
    result.commands.pop("info", None)
