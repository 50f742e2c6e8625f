"""The Celery app the tests' workers and beat run: the project's own, plus a test-only pause.

With ``ACTIVITY_TEST_PAUSE_AFTER_CLAIM=N`` in its environment, a worker's flush sleeps
``ACTIVITY_TEST_PAUSE_SECONDS`` after claiming its N-th batch (hooked on the flush's
``batch_claimed`` signal), so a test can SIGKILL it holding a claim, or, with a short pause, keep
its lock while other runs arrive. ``ACTIVITY_TEST_CONSTANTS`` (JSON: ``{"module.NAME": value}``)
sets some of the service's constants for the run: a short job lock, small flush batches, fast beat
ticks. Nothing of this is in the production code path.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
from typing import Any

from celery.signals import worker_process_init

from project.celery import app

__all__ = ["app"]

log = logging.getLogger(__name__)


CONSTANTS = json.loads(os.environ.get("ACTIVITY_TEST_CONSTANTS", "{}"))
# Modules that load before Django is set up: the job lock's TTL must be in place before
# ``activity.tasks`` loads (it reads it then), the beat intervals before beat builds its schedule.
EARLY = ("activity.services.locks", "activity.schedule")


def _set_constants(modules: tuple[str, ...] | None = None) -> None:
    for dotted, value in CONSTANTS.items():
        module, name = dotted.rsplit(".", 1)
        if modules is None or module in modules:
            setattr(importlib.import_module(module), name, value)


_set_constants(EARLY)
PAUSE_AFTER_CLAIM = int(os.environ.get("ACTIVITY_TEST_PAUSE_AFTER_CLAIM", "0"))
PAUSE_SECONDS = float(os.environ.get("ACTIVITY_TEST_PAUSE_SECONDS", "3600"))


def _pause(sender: Any, batch: int, **kwargs: Any) -> None:
    if batch == PAUSE_AFTER_CLAIM:
        log.warning("test pause after claiming batch %d", batch)
        time.sleep(PAUSE_SECONDS)


@worker_process_init.connect
def _install_pause(**kwargs: Any) -> None:
    # In the pool process, once Django is set up (the flush runs there).
    _set_constants()
    if PAUSE_AFTER_CLAIM:
        from activity.services.flush import batch_claimed

        batch_claimed.connect(_pause, weak=False, dispatch_uid="tests.pause_after_claim")
