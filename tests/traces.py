"""Finds every trace of a user id: in every key under the run's prefix (names, members, fields,
bits) and in every database table. What an erase must leave empty (docs/privacy.md): HyperLogLog
registers (binary strings, not read here) and the tombstone sets are the documented exceptions.
Bits are looked for by what they cannot hide: a person's bits sit at their dense id, which the
erase removes from the map, so any bit or first day at a dense id the map no longer holds is an
erased person's leftover."""

from __future__ import annotations

import redis
from django.conf import settings
from django.db import connection
from redis.cluster import RedisCluster

from activity import conf
from activity.store import audience, families, keys, people
from activity.store.client import scan_steps


def _raw_client() -> redis.Redis | RedisCluster:
    """Bytes in and out: visitor ids are 16 raw bytes, HyperLogLogs binary strings."""
    if conf.settings.REDIS_CLUSTER:
        return RedisCluster.from_url(settings.REDIS_URL)
    return redis.Redis.from_url(settings.REDIS_URL)


def redis_traces(user: str) -> list[str]:
    """Where Redis still holds ``user``: each entry names the key and what holds the id.

    A key is named by the user when its family's ``<user>`` placeholder is the id; members are
    looked for where ids are members (sorted sets: last seen, rankings, views, ``name NUL user``
    entries; sets: pending ``name NUL user`` entries; report rows; the first-visit hashes'
    visitor-id fields; the dense id map's digest field; bitmaps' bits at the user's dense id, or at
    one the map no longer holds). Throttle counters name the user in the key
    (``rate:<scope>:user:<pk>:<window>``).
    """
    client = _raw_client()
    ident, visitor, digest = user.encode(), audience.user_visitor_id(user), people.digest(user)
    held = {int(dense) for dense in client.hvals(keys.dense_ids())}
    prefix = conf.settings.KEY_PREFIX.encode()
    found: list[str] = []
    try:
        for key in (key for step in scan_steps(client, prefix + b"*", 1000) for key in step):
            name = key.decode()
            declared = families.family_of(name)
            if declared is not None and declared[1].get("user") == user:
                found.append(f"{name}: named by the id")
            elif name.startswith(f"{prefix.decode()}rate:") and f":user:{user}:" in name:
                found.append(f"{name}: a throttle counter named by the id")
            kind = client.type(key).decode()
            if kind == "string":
                found += [f"{name}: {what} of a person no longer mapped" for what in _orphans(client, key, held)]
            elif kind == "list":
                if key.endswith(b":rows") and ident in client.lrange(key, 0, -1)[0::3]:  # user, name, views
                    found.append(f"{name}: report row")
            elif kind == "zset":
                if key.endswith(b":erased"):
                    continue  # the tombstones themselves (documented)
                members = client.zrange(key, 0, -1)
                if any(member == ident or member.endswith(b"\0" + ident) for member in members):
                    found.append(f"{name}: sorted-set member")
            elif kind == "set":
                # Only "name NUL user" entries: other sets hold group ids or names, which a user id
                # may spell by chance (a set named by the id is found by its name above).
                if any(member.endswith(b"\0" + ident) for member in client.smembers(key)):
                    found.append(f"{name}: set member")
            elif kind == "hash" and client.hexists(key, visitor):
                found.append(f"{name}: the user's visitor id")
            elif kind == "hash" and client.hexists(key, digest):
                found.append(f"{name}: the user's dense id")
    finally:
        client.close()
    return found


def _orphans(client: redis.Redis | RedisCluster, key: bytes, held: set[int]) -> list[str]:
    """The bits (or first days) of ``key``, a bitmap by dense id, at ids ``held`` does not hold."""
    bitmaps = (
        keys.active_bits,
        keys.active_bits_week,
        keys.active_bits_month,
        keys.first_active,
        keys.first_moved,
        keys.group_members,
    )
    declared = families.family_of(key.decode())
    if key.decode() == keys.first_day():
        raw = client.get(key)
        days = [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw) - 1, 2)]
        return [f"first day at {dense}" for dense, day in enumerate(days) if day and dense not in held]
    if declared is None or declared[0].builder not in bitmaps:
        return []
    raw = client.get(key)
    ones = (byte * 8 + bit for byte, value in enumerate(raw) if value for bit in range(8) if value & (0x80 >> bit))
    return [f"bit {dense}" for dense in ones if dense not in held]


def database_traces(user: str) -> list[str]:
    """Every table holding a cell equal to ``user`` (use an id no other row can spell by chance)."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")  # the schema's own table names
            if any(str(cell) == user for row in cursor.fetchall() for cell in row):
                found.append(table)
    return found


def dense_id(client: redis.Redis | RedisCluster, user: str) -> int | None:
    """The dense id the map holds for ``user`` (their bit in the ``{au}`` bitmaps), or None."""
    found = client.hget(keys.dense_ids(), people.digest(user))
    return None if found is None else int(found)
