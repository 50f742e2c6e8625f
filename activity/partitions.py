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
