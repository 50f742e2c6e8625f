"""Last seen per user: a sorted set written only through "ZADD unless smaller", so it never moves
back, and pruned unless a change still waits for the database. It is split by user over
``ACTIVITY_LAST_SEEN_PARTITIONS`` hash tags (one by default), so a Cluster can spread the writes
(docs/last-seen.md). One layout whatever the count: partition ``i`` is ``{ls:<i>}``."""

from __future__ import annotations

import functools
import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from activity import conf
from activity.store import keys, partitioning
from activity.store.client import Client, Sum, chunks
from activity.store.scripts import LuaScript, Pipeline

ZADD_UNLESS_SMALLER = LuaScript("zadd_unless_smaller")
PRUNE = LuaScript("prune_last_seen")
PAGE_AFTER = LuaScript("last_seen_page_after")
ZREM_IF_SCORE = LuaScript("zrem_if_score")

# Earlier releases kept last seen in one set ({ls}), and a change of ACTIVITY_LAST_SEEN_PARTITIONS
# leaves members in partitions that are no longer theirs: the upgrade looks in partitions 0 to this.
EARLIER_PARTITIONS = 256
# Users per update call: a last-seen write is a few microseconds of Redis, so a call of this many
# stays within a few milliseconds and within the script's unpack (about 4,000 users).
PER_UPDATE = 1000


@dataclass(frozen=True, slots=True)
class Partition:
    """The keys of one partition (one hash tag): last seen, dirty, claimed and the tombstones of
    erased users its writes skip."""

    seen: str
    dirty: str
    claimed: str
    tombstones: str


def partition_count() -> int:
    """``ACTIVITY_LAST_SEEN_PARTITIONS``: every process must agree (``activity_upgrade`` moves what
    is stored after a change). One costs a batch one script call; each more spreads a Cluster's
    writes but adds a call to a batch and a command to every online read."""
    return conf.settings.LAST_SEEN_PARTITIONS


def partitions() -> tuple[Partition, ...]:
    """Every partition, in index order."""
    return _partitions(keys.prefix(), partition_count())


def _partition(i: int) -> Partition:
    return Partition(keys.last_seen(i), keys.last_seen_dirty(i), keys.last_seen_claimed(i), keys.tombstones(f"ls:{i}"))


@functools.lru_cache(maxsize=4)
def _partitions(prefix: str, count: int) -> tuple[Partition, ...]:
    """Built once rather than on every write and read; ``prefix`` and ``count`` are their only inputs."""
    return tuple(_partition(i) for i in range(count))


def partition_of(user: str) -> Partition:
    """The partition holding ``user``."""
    return partitions()[partition_index(user)]


def partition_index(user: str) -> int:
    """The index of ``user``'s partition (``partitioning.partition_of``)."""
    return partitioning.partition_of(user, partition_count())


def by_partition(users: Iterable[str]) -> dict[int, list[str]]:
    """``users`` grouped by partition index (first-seen order kept within each)."""
    return partitioning.spread(users, partition_count())


def _flatten(scores: Mapping[str, float], users: Iterable[str]) -> list[str | float]:
    args: list[str | float] = []
    for member in users:
        args += (repr(scores[member]), member)
    return args


def queue_update(pipe: Pipeline, scores: Mapping[str, float], now: float) -> Sum:
    """Queue an EVALSHA per partition touched and ``PER_UPDATE`` users, moving last seen forward
    (tombstoned users skipped) and marking those who moved for the flush; returns how many moved, once
    the pipeline has run."""
    parts = partitions()
    return Sum(
        pipe.script(
            ZADD_UNLESS_SMALLER,
            [parts[i].seen, parts[i].dirty, parts[i].tombstones],
            [repr(now), *_flatten(scores, call)],
        )
        for i, users in by_partition(scores).items()
        for call in chunks(users, PER_UPDATE)
    )


def get(client: Client, user: str) -> float | None:
    return client.zscore(partition_of(user).seen, user)


def get_many(client: Client, users: Iterable[str]) -> dict[str, float | None]:
    """Last seen of each of ``users`` (None: never seen): one ZMSCORE per partition, one round trip."""
    users = list(users)
    if not users:
        return {}
    parts = partitions()
    groups = by_partition(users)
    pipe = client.pipeline(transaction=False)
    for i, members in groups.items():
        pipe.zmscore(parts[i].seen, members)
    found: dict[str, float | None] = {}
    for members, scores in zip(groups.values(), pipe.execute(), strict=True):
        found.update(zip(members, scores, strict=True))
    return {user: found[user] for user in users}


def queue_count_since(pipe: Pipeline, since: float) -> Sum:
    """Queue one ZCOUNT per partition; returns the users seen since ``since``, once the pipeline has run."""
    counts = []
    for part in partitions():
        pipe.zcount(part.seen, since, "+inf")
        counts.append(pipe.reply())
    return Sum(counts)


def page_and_count_since(
    client: Client, since: float, limit: int, before: tuple[float, str] | None = None
) -> tuple[list[tuple[str, float]], int]:
    """Users seen at or after ``since``, most recent first, strictly after the keyset ``before``
    (score, member): users moving to the top meanwhile cannot shift a later page; and how many were
    seen since. One round trip, a page per partition merged, each O(log N + limit) however many
    share the cursor's score."""
    pipe = client.pipeline(transaction=False)
    parts = partitions()
    for part in parts:
        if before is None:
            pipe.zrange(part.seen, "+inf", since, byscore=True, desc=True, offset=0, num=limit, withscores=True)
        else:
            pipe.script(PAGE_AFTER, [part.seen], [repr(float(before[0])), before[1], repr(float(since)), limit])
    counted = queue_count_since(pipe, since)
    replies = pipe.execute()
    pages = []
    for reply in replies[: len(parts)]:
        if before is None:
            pages.append(reply)
        else:
            pages.append([(reply[i], float(reply[i + 1])) for i in range(0, len(reply), 2)])
    merged = heapq.merge(*pages, key=lambda row: (row[1], row[0]), reverse=True)
    page = [row for _, row in zip(range(limit), merged, strict=False)]
    return page, counted.value


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


def earlier_layouts(client: Client) -> list[tuple[Partition, int | None]]:
    """The key sets of earlier releases' layouts that hold anything, each with the partition index
    whose members may stay (None: all go): the one set ``{ls}``, and partitions 0 to
    ``EARLIER_PARTITIONS`` - 1 (those below the partition count hold this layout's members too). One
    round trip; one EXISTS a key, as a cluster refuses one across slots."""
    one_set = Partition(
        keys.unpartitioned_last_seen(),
        keys.unpartitioned_last_seen_dirty(),
        keys.unpartitioned_last_seen_claimed(),
        keys.tombstones("ls"),
    )
    sources: list[tuple[Partition, int | None]] = [(one_set, None)]
    count = partition_count()
    sources += [(_partition(i), i if i < count else None) for i in range(EARLIER_PARTITIONS)]
    pipe = client.pipeline(transaction=False)
    for source, _ in sources:
        for key in (source.seen, source.dirty, source.claimed):
            pipe.exists(key)
    found = pipe.execute()
    return [source for n, source in enumerate(sources) if any(found[3 * n : 3 * n + 3])]


def upgrade_step(
    client: Client, source: Partition, home: int | None, key: str, cursor: int, step: int
) -> tuple[int, int]:
    """Move the members of one ZSCAN step of ``key`` (one of ``source``'s sets) that live elsewhere
    now, with their last seen and change marks; returns (the next cursor, 0 when done; how many
    moved). Four round trips, each bounded by ``step``.

    Copy (``ZADD GT`` / ``LT``, so a repeat changes nothing; an old claim becomes a change again),
    then compare-and-delete: a kill in between leaves a member in both places, never in neither, and
    one updated meanwhile by a process still on the earlier layout stays for a later run.
    """
    cursor, found = client.zscan(key, cursor, count=step)
    members = [member for member, _ in found if home is None or partition_index(member) != home]
    if not members:
        return cursor, 0
    read = client.pipeline(transaction=True)  # one slot: a source's sets share its hash tag
    for name in (source.seen, source.dirty, source.claimed):
        read.zmscore(name, members)
    seen, dirty, claimed = read.execute()
    targets = partitions()
    write = client.pipeline(transaction=False)
    at = {user: n for n, user in enumerate(members)}
    for i, users in by_partition(members).items():
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
    for name, read_scores in ((source.seen, seen), (source.dirty, dirty), (source.claimed, claimed)):
        args: list[str] = []
        for member, score in zip(members, read_scores, strict=True):
            if score is not None:
                args += (repr(score), member)
        if args:
            forget.script(ZREM_IF_SCORE, [name], args)
    forget.execute()
    return cursor, len(members)
