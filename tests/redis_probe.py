"""Counting what reaches Redis: server-side command calls and read events, and the round trips the
service counts itself (``activity_redis_round_trips``: every command of its store's client, a
pipeline once however many nodes it reaches)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import redis
from prometheus_client import REGISTRY
from redis.cluster import RedisCluster

from tests.redis_counts import command_calls


def round_trips() -> float:
    """The round trips this process's store client has made so far (the service's own counter)."""
    return REGISTRY.get_sample_value("activity_redis_round_trips_total")


class RoundTrips:
    """``with RoundTrips() as sent: ...``: ``sent.count`` is the round trips made in the block (inside
    it, so far)."""

    def __enter__(self) -> RoundTrips:
        self.start, self.end = round_trips(), None
        return self

    def __exit__(self, *exc: object) -> None:
        self.end = round_trips()

    @property
    def count(self) -> int:
        return int((round_trips() if self.end is None else self.end) - self.start)


@dataclass
class Probe:
    commands: Counter = field(default_factory=Counter)  # INFO commandstats delta (INFO left out)
    server_reads: int = 0  # INFO stats total_reads_processed delta, minus the probe's own INFO
    client_sends: int = 0  # round trips the store's client made (RoundTrips)


def _reads(client: redis.Redis | RedisCluster) -> list[int]:
    """Read events each server processed so far (every primary of a cluster)."""
    if isinstance(client, RedisCluster):
        stats = client.info("stats", target_nodes=RedisCluster.PRIMARIES)
        return [stats[name]["total_reads_processed"] for name in sorted(stats)]
    return [client.info("stats")["total_reads_processed"]]


@contextmanager
def probe(client: redis.Redis | RedisCluster) -> Iterator[Probe]:
    """Measure what the block sends. Needs a server no one else uses (the run's private Redis).

    A pipeline is one round trip and, for a request-sized pipeline, one read event on the server:
    the two together show the round trips a block costs, whatever commands travel in them. On a
    cluster ``server_reads`` is the most any one primary processed (a pipeline reads once on each
    node it reaches).
    """
    result = Probe()
    before_calls = command_calls(client)
    before_reads = _reads(client)
    with RoundTrips() as sent:
        yield result
    result.client_sends = sent.count
    after_reads = _reads(client)
    after_calls = command_calls(client)
    # The second INFO stats counts its own read.
    result.server_reads = max(after - before - 1 for after, before in zip(after_reads, before_reads, strict=True))
    result.commands = after_calls - before_calls
    result.commands.pop("info", None)
