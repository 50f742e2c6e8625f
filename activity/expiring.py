"""A bounded, thread-safe map whose entries expire: what a process remembers to save a query or a
Redis command (API tokens, rate-limit counts, today's activity writes). Past ``size`` entries the
least recently used go, so no client can grow it."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

from activity import clock

V = TypeVar("V")


class ExpiringCache(Generic[V]):
    def __init__(self, size: int) -> None:
        self._entries: OrderedDict[Hashable, tuple[V, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.size = size

    def get(self, key: Hashable) -> V | None:
        """None when missing or expired (by ``clock.now()``, so tests can move time)."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            if found[1] <= clock.now():
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: Hashable, value: V, until: float) -> None:
        with self._lock:
            self._entries[key] = (value, until)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
