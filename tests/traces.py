"""Finds every trace of a user id: in every key under the run's prefix (names, members, fields,
bits) and in every database table. What an erase must leave empty (docs/privacy.md): HyperLogLog
registers (binary strings, not read here) and the tombstone sets are the documented exceptions."""

from __future__ import annotations

import redis
from django.conf import settings
from django.db import connection
from redis.cluster import RedisCluster

from activity import conf
from activity.store import audience, keys
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
    visitor-id fields; bitmaps' bits). Throttle
    counters name the user in the key (``rate:<scope>:user:<pk>:<window>``).
    """
    client = _raw_client()
    ident, visitor = user.encode(), audience.user_visitor_id(user)
    bit = audience.bitmap_offset(user)
    prefix = conf.settings.KEY_PREFIX.encode()
    found: list[str] = []
    try:
        for key in (key for step in scan_steps(client, prefix + b"*", 1000) for key in step):
            name = key.decode()
            declared = keys.family_of(name)
            if declared is not None and declared[1].get("user") == user:
                found.append(f"{name}: named by the id")
            elif name.startswith(f"{prefix.decode()}rate:") and f":user:{user}:" in name:
                found.append(f"{name}: a throttle counter named by the id")
            kind = client.type(key).decode()
            if kind == "string":
                if b":bits:" in key and bit is not None and client.getbit(key, bit):
                    found.append(f"{name}: bit {bit} set")
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
    finally:
        client.close()
    return found


def database_traces(user: str) -> list[str]:
    """Every table holding a cell equal to ``user`` (use an id no other row can spell by chance)."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")  # the schema's own table names
            if any(str(cell) == user for row in cursor.fetchall() for cell in row):
                found.append(table)
    return found
