"""Last seen: each user's latest activity, who is online, and the upkeep of the keys. Writes only
move a last seen forward, so a late or repeated event never moves it back; Redis keeps the recent
past (``prune``), the database everything (``services.flush``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from activity import clock, conf
from activity.services import groups, locks
from activity.store import groups as group_store
from activity.store import last_seen as store
from activity.store.client import get_client, total


@dataclass(frozen=True, slots=True)
class LastSeen:
    user: str
    ts: float
    online: bool


def is_online(ts: float) -> bool:
    """Whether a last seen at ``ts`` is within the online window of now."""
    return ts >= clock.now() - conf.settings.ONLINE_WINDOW


def get(user: str) -> LastSeen | None:
    """One user's last seen, or None when never seen. One round trip."""
    ts = store.get(get_client(), user)
    if ts is None:
        return None
    return LastSeen(user=user, ts=ts, online=is_online(ts))


def get_many(users: Iterable[str]) -> dict[str, float | None]:
    """Last seen of many users (None for never seen). One round trip (ZMSCORE)."""
    return store.get_many(get_client(), users)


def online_count(within: int | None = None) -> int:
    """How many users were seen in the last ``within`` seconds (default: the online window)."""
    within = conf.settings.ONLINE_WINDOW if within is None else within
    return store.count_since(get_client(), clock.now() - within)


def online_page(
    within: int | None = None, limit: int = 50, after: tuple[float, str] | None = None
) -> tuple[list[tuple[str, float]], int]:
    """A page of online users, most recent first, continuing after the (ts, user) ``after``, and
    how many are online (``online_count``, the same moment); one round trip."""
    within = conf.settings.ONLINE_WINDOW if within is None else within
    page, count = store.page_and_count_since(get_client(), clock.now() - within, limit, after)
    return page, count or 0


def seed(latest: Mapping[str, float]) -> int:
    """Move users' last seen forward to times known from elsewhere (``last_login``), never back, and
    nothing else; returns how many moved. One round trip, a second when a user who moved is in a
    built group view; the next flush writes the moved users' rows."""
    if not latest:
        return 0
    pipe = get_client().pipeline(transaction=False)
    moved_at = store.queue_update(pipe, latest, clock.now())
    groups_at = group_store.queue_groups_of(pipe, latest)
    results = pipe.execute()
    moved = total(results, moved_at)
    if moved:
        found = zip(latest, results[groups_at], strict=True)
        groups.propagate(latest, {user: ids for user, ids in found if ids})
    return moved


def prune(retention: float | None = None, step: int = 1000) -> tuple[int, int]:
    """Drop last-seen members older than the retention from Redis, never one whose change is not yet
    in the database; returns (removed, kept because unflushed)."""
    retention = conf.settings.LAST_SEEN_RETENTION if retention is None else retention
    return store.prune(get_client(), clock.now() - retention, step)


def migrate(step: int = 1000, progress: Callable[[int], None] | None = None) -> int:
    """Move the unpartitioned last seen into the configured partitions, ``step`` members a step;
    returns how many moved. Safe to interrupt and run again. ``ValueError`` when the setting is 1,
    ``RuntimeError`` when another migration holds the lock."""
    count = conf.settings.LAST_SEEN_PARTITIONS
    if count == 1:
        raise ValueError("ACTIVITY_LAST_SEEN_PARTITIONS is 1: there are no partitions to move last seen into")
    moved = 0
    with locks.exclusive_job("last-seen-partitions") as held:
        if not held:
            raise RuntimeError("another last-seen migration is running")
        while found := store.migrate_step(get_client(), count, step):
            moved += found
            if progress is not None:
                progress(moved)
    return moved


def layout_problems() -> list[str]:
    """What disagrees between ``ACTIVITY_LAST_SEEN_PARTITIONS`` and the last seen in Redis (for
    ``check --deploy``): data under a layout the setting does not read. One round trip."""
    count = conf.settings.LAST_SEEN_PARTITIONS
    unpartitioned, partitioned = store.layouts_holding_data(get_client())
    if count == 1 and partitioned:
        return [f"last seen is partitioned in Redis (partitions {partitioned[:5]}...) but the setting is 1"]
    problems = []
    if count > 1 and unpartitioned:
        problems.append(f"the setting is {count} but unpartitioned last seen remains: run activity_partition_last_seen")
    if count > 1 and any(i >= count for i in partitioned):
        problems.append(f"partitions past the setting's {count} hold last seen (found {partitioned[-1]})")
    return problems
