"""The sweep: keys of ours found without a TTL get one (or are deleted), so nothing stray lives forever."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from activity import clock, conf
from activity.store import sweep as store
from activity.store.client import get_client

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SweepResult:
    scanned: int
    long_lived: int
    repaired: int
    deleted: int


def sweep(count: int = 200) -> SweepResult:
    """SCAN the service's prefix ``count`` keys per step; give a TTL to (or delete) keys without one.

    Only keys under ``ACTIVITY_KEY_PREFIX`` are looked at; the documented long-lived keys are left
    alone, and every other key gets what its family's writers give it (``activity/store/keys.py``).
    Each repaired key is logged by name, so a stray is easy to trace to its writer.
    """
    scanned = long_lived = repaired = deleted = 0
    for step in store.sweep(get_client(), count, conf.settings.SWEEP_DEFAULT_TTL, clock.now()):
        scanned += step.scanned
        long_lived += step.long_lived
        repaired += len(step.repaired)
        deleted += len(step.deleted)
        if step.repaired or step.deleted:
            log.warning("sweep: keys without a TTL: repaired %s, deleted %s", step.repaired[:5], step.deleted[:5])
    return SweepResult(scanned=scanned, long_lived=long_lived, repaired=repaired, deleted=deleted)
