"""Moving last seen from the unpartitioned layout to ``ACTIVITY_LAST_SEEN_PARTITIONS`` partitions.

Run it after every process (web, workers, beat) runs with the new setting: from then on writes go
to the partitions, and the move carries the older data over in bounded steps without losing an
update (see ``activity.store.last_seen.migrate_step``). Until it ends, reads do not see the users
still waiting in the old keys; nothing written is lost, and the next flush writes every change.
"""

from __future__ import annotations

from collections.abc import Callable

from activity import conf, locks
from activity.store import last_seen as store
from activity.store.client import get_client


def migrate(step: int = 1000, progress: Callable[[int], None] | None = None) -> int:
    """Move every member of the unpartitioned keys into the configured partitions, ``step``
    members a step; returns how many were moved. Safe to run again or to interrupt: each step is
    copy-then-compare-and-delete. Raises ``ValueError`` when the setting is 1 (nothing to move to)
    and ``RuntimeError`` when another migration holds the lock."""
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
