"""The sweep: keys of ours found without a TTL get one (or are deleted), so nothing stray lives forever."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from django.dispatch import Signal

from activity import clock
from activity.store import sweep as store
from activity.store.client import get_client

DEFAULT_TTL = 86400  # seconds given to a key under the prefix that matches no declared family

log = logging.getLogger(__name__)


# Sent after each SCAN step with ``scanned`` (keys of ours it found): the management command's progress.
step_swept = Signal()


@dataclass(frozen=True, slots=True)
class SweepResult:
    scanned: int
    long_lived: int
    repaired: int
    deleted: int
    merged: int  # legacy first-visit hashes merged into their generation (docs/visitors.md)


def steps_expected(count: int = 200) -> int:
    """About how many SCAN steps a sweep takes: SCAN walks every key of the database, ``count`` a step."""
    return max(1, math.ceil(store.keyspace_size(get_client()) / count))


def sweep(count: int = 200, dry_run: bool = False) -> SweepResult:
    """SCAN the prefix ``count`` keys a step; give keys without a TTL what their family's writers
    give (``store/keys.py``), or delete them; merge the legacy first-visit hashes into their
    generation. Each step logs a few repaired keys by name, so a stray can be traced to its writer.
    ``dry_run`` changes nothing and counts what a sweep would do."""
    scanned = long_lived = repaired = deleted = merged = 0
    steps = store.sweep(get_client(), count, DEFAULT_TTL, clock.now(), dry_run=dry_run)
    for step in steps:
        scanned += step.scanned
        long_lived += step.long_lived
        repaired += len(step.repaired)
        deleted += len(step.deleted)
        merged += len(step.merged)
        if step.repaired or step.deleted:
            log.warning(
                "sweep%s: keys without a TTL: repaired %s, deleted %s",
                " (dry run: nothing changed)" if dry_run else "",
                step.repaired[:5],
                step.deleted[:5],
            )
        step_swept.send(sender=sweep, scanned=step.scanned)
    return SweepResult(scanned=scanned, long_lived=long_lived, repaired=repaired, deleted=deleted, merged=merged)
