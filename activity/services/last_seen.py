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
from activity.store.client import get_client


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


def online_page(
    within: int | None = None, limit: int = 50, after: tuple[float, str] | None = None
) -> tuple[list[tuple[str, float]], int]:
    """A page of online users, most recent first, continuing after the (ts, user) ``after``, and
    how many are online at the same moment; one round trip."""
    within = conf.settings.ONLINE_WINDOW if within is None else within
    return store.page_and_count_since(get_client(), clock.now() - within, limit, after)


def seed(latest: Mapping[str, float]) -> int:
    """Move users' last seen forward to times known from elsewhere (``last_login``), never back, and
    nothing else; returns how many moved. One round trip, a second when a user who moved is in a
    built group view; the next flush writes the moved users' rows."""
    if not latest:
        return 0
    pipe = get_client().pipeline(transaction=False)
    moved = store.queue_update(pipe, latest, clock.now())
    groups_of = group_store.GroupIndexes(pipe, latest)
    pipe.execute()
    if moved.value:
        groups.propagate(latest, groups_of.grouped())
    return moved.value


def prune(retention: float | None = None, step: int = 1000) -> tuple[int, int]:
    """Drop last-seen members older than the retention from Redis, never one whose change is not yet
    in the database; returns (removed, kept because unflushed)."""
    retention = conf.settings.LAST_SEEN_RETENTION if retention is None else retention
    return store.prune(get_client(), clock.now() - retention, step)


def upgrade(step: int = 1000, progress: Callable[[int], None] | None = None) -> int:
    """Move last seen kept under an earlier release's layout (one set, or another number of
    partitions) into this one's partitions, ``step`` members a step; returns how many moved. Safe to
    interrupt and to run again: a run on this layout moves nothing. ``RuntimeError`` when another
    upgrade holds the lock."""
    client = get_client()
    moved = 0
    with locks.exclusive_job("last-seen-upgrade") as held:
        if not held:
            raise RuntimeError("another last-seen upgrade is running")
        for source, home in store.earlier_layouts(client):
            for key in (source.seen, source.dirty, source.claimed):
                cursor = None
                while cursor != 0:
                    cursor, found = store.upgrade_step(client, source, home, key, cursor or 0, step)
                    moved += found
                    if found and progress is not None:
                        progress(moved)
    return moved
