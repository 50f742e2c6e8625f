"""The Celery app the tests' workers and beat run: the project's own, plus a test-only pause.

With ``ACTIVITY_TEST_PAUSE_AFTER_CLAIM=N`` in its environment, a worker's flush sleeps
``ACTIVITY_TEST_PAUSE_SECONDS`` after claiming its N-th batch (hooked on the flush's
``batch_claimed`` signal), so a test can SIGKILL it holding a claim, or, with a short pause, keep
its lock while other runs arrive. Nothing of this is in the production code path.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from celery.signals import worker_process_init

from project.celery import app

__all__ = ["app"]

log = logging.getLogger(__name__)
PAUSE_AFTER_CLAIM = int(os.environ.get("ACTIVITY_TEST_PAUSE_AFTER_CLAIM", "0"))
PAUSE_SECONDS = float(os.environ.get("ACTIVITY_TEST_PAUSE_SECONDS", "3600"))


def _pause(sender: Any, batch: int, **kwargs: Any) -> None:
    if batch == PAUSE_AFTER_CLAIM:
        log.warning("test pause after claiming batch %d", batch)
        time.sleep(PAUSE_SECONDS)


@worker_process_init.connect
def _install_pause(**kwargs: Any) -> None:
    # In the pool process, once Django is set up (the flush runs there).
    if PAUSE_AFTER_CLAIM:
        from activity.services.flush import batch_claimed

        batch_claimed.connect(_pause, weak=False, dispatch_uid="tests.pause_after_claim")
