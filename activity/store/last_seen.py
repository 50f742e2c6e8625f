"""Last seen per user: a sorted set written only through "ZADD unless smaller", so it never moves
back, and pruned unless a change still waits for the database. ``ACTIVITY_LAST_SEEN_PARTITIONS``
splits it by user over hash tags, so no Cluster slot carries every write (docs/last-seen.md)."""

from __future__ import annotations

import functools
import heapq
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

from activity import conf
from activity.store import keys
from activity.store.client import Client
from activity.store.scripts import LuaScript, Pipeline

ZADD_UNLESS_SMALLER = LuaScript("zadd_unless_smaller")
PRUNE = LuaScript("prune_last_seen")
PAGE_AFTER = LuaScript("last_seen_page_after")
ZREM_IF_SCORE = LuaScript("zrem_if_score")


@dataclass(frozen=True, slots=True)
class Partition:
    """The keys of one partition (one hash tag): last seen, dirty, claimed and the tombstones of
    erased users its writes skip."""

    seen: str
    dirty: str
    claimed: str
    tombstones: str


def partitions(count: int | None = None) -> tuple[Partition, ...]:
    """Every partition of ``count`` (default: ``ACTIVITY_LAST_SEEN_PARTITIONS``); 1 is the
    unpartitioned layout."""
    count = conf.settings.LAST_SEEN_PARTITIONS if count is None else count
    if count < 1:
        raise ImproperlyConfigured(f"ACTIVITY_LAST_SEEN_PARTITIONS must be at least 1, not {count}")
    return _partitions(count, keys.prefix())


@functools.lru_cache(maxsize=16)
def _partitions(count: int, prefix: str) -> tuple[Partition, ...]:
    """Built once rather than on every write and read; ``prefix`` is the names' only other input."""
    if count == 1:
        return (Partition(keys.last_seen(), keys.last_seen_dirty(), keys.last_seen_claimed(), keys.tombstones("ls")),)
    return tuple(
        Partition(
            keys.last_seen_partition(i),
            keys.last_seen_dirty_partition(i),
            keys.last_seen_claimed_partition(i),
            keys.tombstones(f"ls:{i}"),
        )
        for i in range(count)
    )


def layouts_holding_data(client: Client, probe: int = 64) -> tuple[bool, list[int]]:
    """(whether the unpartitioned keys hold anything, which of partitions 0..``probe``-1 hold last
    seen), for the deploy check. One round trip; one EXISTS a key, as a cluster refuses one across slots."""
    pipe = client.pipeline(transaction=False)
    for key in (keys.last_seen(), keys.last_seen_dirty(), keys.last_seen_claimed()):
        pipe.exists(key)
    for i in range(probe):
        pipe.exists(keys.last_seen_partition(i))
    found = pipe.execute()
    return any(found[:3]), [i for i, exists in enumerate(found[3:]) if exists]


def partition_of(user: str) -> Partition:
    """The partition holding ``user``."""
    parts = partitions()
    return parts[partition_index(user, len(parts))]


def partition_index(user: str, count: int) -> int:
    """CRC-32 of the id, the same in every process and release (``hash`` of a string is salted)."""
    return zlib.crc32(user.encode()) % count if count > 1 else 0


def by_partition(users: Iterable[str], count: int | None = None) -> dict[int, list[str]]:
    """``users`` grouped by partition index (first-seen order kept within each)."""
    count = conf.settings.LAST_SEEN_PARTITIONS if count is None else count
    groups: dict[int, list[str]] = defaultdict(list)
    for user in users:
        groups[partition_index(user, count)].append(user)
    return groups


def _flatten(scores: Mapping[str, float], users: Iterable[str]) -> list[str | float]:
    args: list[str | float] = []
    for member in users:
        args += (repr(scores[member]), member)
    return args


def queue_update(pipe: Pipeline, scores: Mapping[str, float], now: float) -> list[int]:
    """Queue one EVALSHA per partition touched, moving last seen forward (tombstoned users skipped);
    returns the reply indexes, whose replies sum to the users who moved."""
    parts = partitions()
    return [
        pipe.script(
            ZADD_UNLESS_SMALLER,
            [parts[i].seen, parts[i].dirty, parts[i].tombstones],
            [repr(now), *_flatten(scores, users)],
        )
        for i, users in by_partition(scores).items()
    ]


def update(client: Client, scores: Mapping[str, float], now: float) -> int:
    """Move each user's last seen forward (never back); returns how many moved. One round trip."""
    if not scores:
        return 0
    pipe = client.pipeline(transaction=False)
    indexes = queue_update(pipe, scores, now)
    results = pipe.execute()
    return sum(results[i] for i in indexes)


def get(client: Client, user: str) -> float | None:
    parts = partitions()
    return client.zscore(parts[partition_index(user, len(parts))].seen, user)


def get_many(client: Client, users: Iterable[str]) -> dict[str, float | None]:
    """Last seen of each of ``users`` (None: never seen): one ZMSCORE per partition, one round trip."""
    users = list(users)
    if not users:
        return {}
    parts = partitions()
    groups = by_partition(users, len(parts))
    pipe = client.pipeline(transaction=False)
    for i, members in groups.items():
        pipe.zmscore(parts[i].seen, members)
    found: dict[str, float | None] = {}
    for members, scores in zip(groups.values(), pipe.execute(), strict=True):
        found.update(zip(members, scores, strict=True))
    return {user: found[user] for user in users}


def count_since(client: Client, since: float) -> int:
    pipe = client.pipeline(transaction=False)
    indexes = queue_count_since(pipe, since)
    results = pipe.execute()
    return sum(results[i] for i in indexes)


def queue_count_since(pipe: Pipeline, since: float) -> list[int]:
    """Queue one ZCOUNT per partition; returns their reply indexes (the replies add up)."""
    first = len(pipe)
    for part in partitions():
        pipe.zcount(part.seen, since, "+inf")
    return list(range(first, len(pipe)))


def page_since(
    client: Client, since: float, limit: int, before: tuple[float, str] | None = None
) -> list[tuple[str, float]]:
    """Users seen at or after ``since``, most recent first, strictly after the keyset ``before``
    (score, member): users moving to the top meanwhile cannot shift a later page. One round trip, a
    page per partition merged, each O(log N + limit) however many share the cursor's score."""
    return page_and_count_since(client, since, limit, before, count=False)[0]


def page_and_count_since(
    client: Client, since: float, limit: int, before: tuple[float, str] | None = None, count: bool = True
) -> tuple[list[tuple[str, float]], int | None]:
    """``page_since`` and (unless ``count`` is False) ``count_since``, in one round trip."""
    pipe = client.pipeline(transaction=False)
    parts = partitions()
    for part in parts:
        if before is None:
            pipe.zrange(part.seen, "+inf", since, byscore=True, desc=True, offset=0, num=limit, withscores=True)
        else:
            pipe.script(PAGE_AFTER, [part.seen], [repr(float(before[0])), before[1], repr(float(since)), limit])
    counted = queue_count_since(pipe, since) if count else []
    replies = pipe.execute()
    pages = []
    for reply in replies[: len(parts)]:
        if before is None:
            pages.append(reply)
        else:
            pages.append([(reply[i], float(reply[i + 1])) for i in range(0, len(reply), 2)])
    merged = heapq.merge(*pages, key=lambda row: (row[1], row[0]), reverse=True)
    page = [row for _, row in zip(range(limit), merged, strict=False)]
    return page, sum(replies[i] for i in counted) if count else None


def prune(client: Client, cutoff: float, step: int) -> tuple[int, int]:
    """Remove members last seen before ``cutoff`` unless still unflushed; returns (removed, kept).
    ``step`` members a script call, so no call's work grows with the users."""
    removed = kept = 0
    for part in partitions():
        offset = 0
        while True:
            examined, gone = PRUNE(client, [part.seen, part.dirty, part.claimed], [repr(float(cutoff)), offset, step])
            removed += gone
            offset += examined - gone
            if examined < step:
                break
        kept += offset
    return removed, kept


def migrate_step(client: Client, count: int, step: int) -> int:
    """Move up to ``step`` members of each unpartitioned key into the ``count`` partitions; returns
    how many distinct members were read (0: nothing is left). Four round trips, each bounded by ``step``.

    Copy (``ZADD GT`` / ``LT``, so a repeat changes nothing; an old claim becomes a change again),
    then compare-and-delete: a kill in between leaves a member in both layouts, never in neither, and
    one updated meanwhile by a process on the old layout stays for the next step.
    """
    source = partitions(1)[0]
    read = client.pipeline(transaction=True)  # one slot: the unpartitioned keys share {ls}
    for key in (source.seen, source.dirty, source.claimed):
        read.zrange(key, 0, step - 1)
    members = list(dict.fromkeys(member for found in read.execute() for member in found))
    if not members:
        return 0
    read = client.pipeline(transaction=True)
    for key in (source.seen, source.dirty, source.claimed):
        read.zmscore(key, members)
    seen, dirty, claimed = read.execute()
    targets = partitions(count)
    write = client.pipeline(transaction=False)
    at = {user: n for n, user in enumerate(members)}
    for i, users in by_partition(members, count).items():
        scores: dict[str, float] = {}
        marks: dict[str, float] = {}
        for user in users:
            n = at[user]
            if seen[n] is not None:
                scores[user] = seen[n]
            pending = [score for score in (dirty[n], claimed[n]) if score is not None]
            if pending:
                marks[user] = min(pending)
        if scores:
            write.zadd(targets[i].seen, scores, gt=True)
        if marks:
            write.zadd(targets[i].dirty, marks, lt=True)
    write.execute()
    forget = client.pipeline(transaction=False)
    for key, read_scores in ((source.seen, seen), (source.dirty, dirty), (source.claimed, claimed)):
        args: list[str] = []
        for member, score in zip(members, read_scores, strict=True):
            if score is not None:
                args += (repr(score), member)
        if args:
            forget.script(ZREM_IF_SCORE, [key], args)
    forget.execute()
    return len(members)
