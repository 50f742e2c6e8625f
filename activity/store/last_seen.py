"""Last seen per user: a sorted set written only through "ZADD unless smaller", and pruned of
members older than the retention unless their change still waits for the database."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from activity.store import keys
from activity.store.client import Client
from activity.store.scripts import LuaScript, Pipeline

ZADD_UNLESS_SMALLER = LuaScript("zadd_unless_smaller")
PRUNE = LuaScript("prune_last_seen")
PAGE_AFTER = LuaScript("last_seen_page_after")


def _flatten(scores: Mapping[str, float]) -> list[str | float]:
    args: list[str | float] = []
    for member, score in scores.items():
        args += (repr(score), member)
    return args


def _update_keys() -> list[str]:
    return [keys.last_seen(), keys.last_seen_dirty(), keys.tombstones("ls")]


def queue_update(pipe: Pipeline, scores: Mapping[str, float], now: float) -> int:
    """Queue one EVALSHA that moves each user's last seen forward (erased users' excepted, while
    tombstoned); returns its reply index."""
    return pipe.script(ZADD_UNLESS_SMALLER, _update_keys(), [repr(now), *_flatten(scores)])


def update(client: Client, scores: Mapping[str, float], now: float) -> int:
    """Move each user's last seen forward (never back); returns how many moved."""
    if not scores:
        return 0
    return ZADD_UNLESS_SMALLER(client, _update_keys(), [repr(now), *_flatten(scores)])


def get(client: Client, user: str) -> float | None:
    return client.zscore(keys.last_seen(), user)


def get_many(client: Client, users: Iterable[str]) -> dict[str, float | None]:
    users = list(users)
    if not users:
        return {}
    return dict(zip(users, client.zmscore(keys.last_seen(), users), strict=True))


def count_since(client: Client, since: float) -> int:
    return client.zcount(keys.last_seen(), since, "+inf")


def queue_count_since(pipe: Pipeline, since: float) -> int:
    """Queue ``count_since``; returns its reply index."""
    at = len(pipe)
    pipe.zcount(keys.last_seen(), since, "+inf")
    return at


def page_since(
    client: Client, since: float, limit: int, before: tuple[float, str] | None = None
) -> list[tuple[str, float]]:
    """Users seen at or after ``since``, most recent first, strictly after the keyset ``before``.

    Keyset paging (score, member) rather than offsets, so users moving to the top while a client
    pages through do not shift later pages and make it skip anyone. One command either way, O(log N
    + limit) even when thousands of users share the cursor's score (``last_seen_page_after.lua``).
    """
    return page_and_count_since(client, since, limit, before, count=False)[0]


def page_and_count_since(
    client: Client, since: float, limit: int, before: tuple[float, str] | None = None, count: bool = True
) -> tuple[list[tuple[str, float]], int | None]:
    """``page_since`` and (unless ``count`` is False) ``count_since`` in one round trip."""
    pipe = client.pipeline(transaction=False)
    if before is None:
        pipe.zrange(keys.last_seen(), "+inf", since, byscore=True, desc=True, offset=0, num=limit, withscores=True)
    else:
        pipe.script(PAGE_AFTER, [keys.last_seen()], [repr(float(before[0])), before[1], repr(float(since)), limit])
    if count:
        queue_count_since(pipe, since)
    replies = pipe.execute()
    page = replies[0]
    if before is not None:
        page = [(page[i], float(page[i + 1])) for i in range(0, len(page), 2)]
    return page, replies[1] if count else None


def prune(client: Client, cutoff: float, step: int) -> tuple[int, int]:
    """Remove members last seen before ``cutoff`` unless still unflushed; returns (removed, kept)."""
    removed = kept = 0
    script_keys = [keys.last_seen(), keys.last_seen_dirty(), keys.last_seen_claimed()]
    while True:
        examined, gone = PRUNE(client, script_keys, [repr(float(cutoff)), kept, step])
        removed += gone
        kept += examined - gone
        if examined < step:
            return removed, kept
