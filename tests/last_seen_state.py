"""Last seen as Redis holds it over every partition, for assertions: the service reads one user's
partition at a time, a test often asks about everyone."""

from __future__ import annotations

from activity.store.last_seen import partition_count, partition_index, partitions


def stored(client, kind: str = "seen") -> dict[str, float]:
    """Every member of every partition's ``kind`` set (``seen``, ``dirty`` or ``claimed``), with its score."""
    found: dict[str, float] = {}
    for part in partitions():
        found.update(client.zrange(getattr(part, kind), 0, -1, withscores=True))
    return found


def per_partition(count: int, prefix: str = "u") -> list[str]:
    """``count`` user ids in each partition, partition after partition: a claim of a share of one
    a partition then takes exactly one user of each."""
    found: dict[int, list[str]] = {i: [] for i in range(partition_count())}
    n = 0
    while any(len(users) < count for users in found.values()):
        user = f"{prefix}{n}"
        if len(found[partition_index(user)]) < count:
            found[partition_index(user)].append(user)
        n += 1
    return [user for users in found.values() for user in users]
