"""Counting what reaches Redis: server-side command calls and read events, client-side sends."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import redis
from redis.connection import AbstractConnection

from tests.redis_counts import command_calls


@dataclass
class Probe:
    commands: Counter = field(default_factory=Counter)  # INFO commandstats delta (INFO left out)
    server_reads: int = 0  # INFO stats total_reads_processed delta, minus the probe's own INFO
    client_sends: int = 0  # network writes by any redis-py connection of this process


@contextmanager
def probe(client: redis.Redis) -> Iterator[Probe]:
    """Measure what the block sends. Needs a server no one else uses (the run's private Redis).

    A pipeline is one send and, for a request-sized pipeline, one read event on the server: the
    two together show the round trips a block costs, whatever commands travel in them.
    """
    result = Probe()
    original = AbstractConnection.send_packed_command

    def counting(self, command, check_health=True):
        result.client_sends += 1
        return original(self, command, check_health)

    before_calls = command_calls(client)
    before_reads = client.info("stats")["total_reads_processed"]
    AbstractConnection.send_packed_command = counting
    try:
        yield result
    finally:
        AbstractConnection.send_packed_command = original
    after_reads = client.info("stats")["total_reads_processed"]
    after_calls = command_calls(client)
    # The second INFO stats counts its own read.
    result.server_reads = after_reads - before_reads - 1
    result.commands = after_calls - before_calls
    result.commands.pop("info", None)
