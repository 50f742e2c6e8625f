"""Server-side command counts (INFO commandstats deltas), for round-trip and SORT-call tests."""

from __future__ import annotations

from collections import Counter

import redis
from redis.cluster import RedisCluster


def command_calls(client: redis.Redis | RedisCluster) -> Counter:
    """Calls per command since the server started; on a cluster, summed over every primary."""
    if isinstance(client, RedisCluster):
        per_node = client.info("commandstats", target_nodes=RedisCluster.PRIMARIES).values()
    else:
        per_node = [client.info("commandstats")]
    calls: Counter = Counter()
    for stats in per_node:
        calls.update({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})
    return calls


class CommandDelta:
    """``with CommandDelta(client) as delta: ...`` then ``delta.calls`` holds what ran in between.

    The INFO calls this helper makes itself are left out.
    """

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.calls: Counter = Counter()

    def __enter__(self) -> CommandDelta:
        self._before = command_calls(self.client)
        return self

    def __exit__(self, *exc: object) -> None:
        after = command_calls(self.client)
        delta = after - self._before
        delta.pop("info", None)
        self.calls = delta
