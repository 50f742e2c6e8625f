"""The service's clock. Everything asks ``clock.now()`` so tests can move time; Lua never reads it."""

import time


def now() -> float:
    return time.time()
