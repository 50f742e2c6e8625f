"""Group views (docs/groups.md): per-group sorted sets of member -> last seen, built on demand and
published whole (RENAME), so a reader sees no view or a complete one. Updates are ``ZADD XX GT`` in
views that exist: they never create a view, add a member or move a score back."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from itertools import islice

from activity.store import keys
from activity.store.client import Client
from activity.store.scripts import LuaScript, Pipeline

UPSERT = LuaScript("group_view_upsert")
PUBLISH = LuaScript("group_view_publish")
GROUPS_OF = LuaScript("groups_of")

NEVER = -1.0  # score of a member never seen: below every real epoch time
KEYS_PER_ROUND = 250  # views per script call
BUILD_TTL_MS = 30_000  # a builder that dies leaves its temporary key for at most this long
INDEX_SLACK = 60  # seconds the user -> groups index outlives the views it points to
ZADD_CHUNK = 1000

# group id -> {user id: last seen}
Updates = Mapping[int, Mapping[str, float]]


def _chunks(items: Iterable, size: int) -> Iterable[list]:
    it = iter(items)
    while batch := list(islice(it, size)):
        yield batch


def read_page(client: Client, group_id: int, start: int, stop: int) -> tuple[int, list[tuple[str, float]], str]:
    """(member count, members ranked start..stop most recent first, membership epoch); one round
    trip. A count of 0: no view (a group without members has none either)."""
    view = keys.group_view(group_id)
    pipe = client.pipeline(transaction=False)
    pipe.zcard(view)
    pipe.zrevrange(view, start, stop, withscores=True)
    pipe.get(keys.group_epoch(group_id))
    count, rows, epoch = pipe.execute()
    return count, rows, epoch or ""


def epoch(client: Client, group_id: int) -> str:
    return client.get(keys.group_epoch(group_id)) or ""


def build(client: Client, group_id: int, scores: Mapping[str, float | None], seen_epoch: str, ttl: int) -> bool:
    """Materialize a group's view; False when a membership change raced it. One MULTI: fill a
    temporary key, index each member's group, publish only if the epoch is still ``seen_epoch``.
    Concurrent builders each use their own key, so the last publish wins with an equally complete view."""
    temp = keys.group_view_build(group_id, secrets.token_hex(8))
    view_ttl_ms = int(ttl * 1000)
    pipe = client.pipeline(transaction=True)
    for batch in _chunks(scores.items(), ZADD_CHUNK):
        pipe.zadd(temp, {member: NEVER if score is None else score for member, score in batch})
        pipe.pexpire(temp, BUILD_TTL_MS)
    for member in scores:
        index = keys.user_groups(member)
        pipe.sadd(index, group_id)
        pipe.expire(index, ttl + INDEX_SLACK)
    published_at = pipe.script(
        PUBLISH, [temp, keys.group_view(group_id), keys.group_epoch(group_id)], [seen_epoch, view_ttl_ms]
    )
    return pipe.execute()[published_at] == 1


def queue_groups_of(pipe: Pipeline, users: Iterable[str]) -> int | None:
    """Queue the read of the users' group indexes (one EVALSHA); returns its reply index, whose reply
    lists each user's group ids in ``users`` order. None when there are no users."""
    index_keys = [keys.user_groups(user) for user in users]
    return pipe.script(GROUPS_OF, index_keys, []) if index_keys else None


def upsert(client: Client, updates: Updates) -> int:
    """Apply last-seen updates to the views that exist; returns how many (view, member) moved. One
    round trip, an EVALSHA per ``KEYS_PER_ROUND`` views."""
    pipe = client.pipeline(transaction=False)
    calls = []
    for batch in _chunks(updates.items(), KEYS_PER_ROUND):
        args: list[str | int] = []
        for position, (_, scores) in enumerate(batch, start=1):
            for member, score in scores.items():
                args += [position, repr(float(score)), member]
        if args:
            calls.append(pipe.script(UPSERT, [keys.group_view(group_id) for group_id, _ in batch], args))
    if not calls:
        return 0
    results = pipe.execute()
    return sum(results[i] for i in calls)


def drop(client: Client, group_ids: Iterable[int], removed: Iterable[tuple[int, str]], ttl: int) -> None:
    """Membership changed: bump each group's epoch (discarding a build in flight), delete its view
    and removed members' index entries; one MULTI. The epoch outlives any build, so none sees it
    expire and come back with the value it read."""
    pipe = client.pipeline(transaction=True)
    for group_id in set(group_ids):
        pipe.incr(keys.group_epoch(group_id))
        pipe.expire(keys.group_epoch(group_id), ttl + INDEX_SLACK)
        pipe.delete(keys.group_view(group_id))
    for group_id, user in removed:
        pipe.srem(keys.user_groups(user), group_id)
    if len(pipe):
        pipe.execute()
