"""What requests leave behind (page activity, API callers' activity, admitted rate-limit counts),
sent to Redis in batches by one thread per process: a request pays a lock and a list append, not a
round trip, and Redis one call of each script per batch, not per view (docs/design.md). A process
killed outright loses at most ``BATCH_MS`` of its requests; one that exits sends the rest. A batch
Redis refuses is dropped with what waited behind it, counted, and tracking pauses (``fail_open``).
Entries go in arrival order; last seen only moves forward, whatever the order.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from django.db import connections

from activity import metrics
from activity.errors import StoreUnavailable
from activity.events import Event
from activity.services import ingest, rate_limits
from activity.services.rate_limits import Window

logger = logging.getLogger("activity.services.tracking")

# A batch goes BATCH_MS after its first entry arrived, or once BATCH_SIZE entries wait; at most
# BUFFER_MAX wait (the oldest dropped past it, while Redis is slow or away).
BATCH_MS = 50
BATCH_SIZE = 500
BUFFER_MAX = 20_000
FAIL_OPEN_BACKOFF = 5  # seconds tracking pauses after Redis failed it


@dataclass(frozen=True, slots=True)
class Activity:
    """One tracked request: a signed-in user's event (and username), or an anonymous visit (and
    the page it viewed, if it was a page view: for funnels)."""

    kind: str
    event: Event | None = None
    name: str = ""
    visitor: tuple[str, float] | None = None
    path: str | None = None


@dataclass
class _Kind:
    """A batch's requests of one kind of traffic, as ``record_events`` takes them."""

    events: list[Event] = field(default_factory=list)
    visitors: list[tuple[str, float]] = field(default_factory=list)
    visitor_views: list[tuple[str, float, str]] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    requests: int = 0


Entry = Activity | Window  # a request's activity, or one request a rate limit admitted in that window


def send(entries: list[Entry]) -> None:
    """Record ``entries`` now: one ``record_events`` call per kind of traffic and one for the
    rate-limit counts, a round trip each. Raises ``StoreUnavailable``."""
    windows = [entry for entry in entries if isinstance(entry, Window)]
    if windows:
        rate_limits.send(windows)
    kinds: dict[str, _Kind] = {}
    for entry in entries:
        if isinstance(entry, Window):
            continue
        batch = kinds.setdefault(entry.kind, _Kind())
        batch.requests += 1
        if entry.event is not None:
            batch.events.append(entry.event)
            batch.names[entry.event.user] = entry.name
        if entry.visitor is not None:
            batch.visitors.append(entry.visitor)
            if entry.path is not None:
                batch.visitor_views.append((*entry.visitor, entry.path))
    for kind, batch in kinds.items():
        ingest.record_events(
            batch.events,
            batch.visitors,
            batch.names,
            kind=kind,
            requests=batch.requests,
            visitor_views=batch.visitor_views,
            day_writes=ingest.PROCESS_DAY_WRITES,
        )


class FailOpen:
    """Counts Redis failures and says whether tracking is paused after the latest one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.failures = 0
        self.skipped = 0
        self._paused_until = 0.0

    def paused(self) -> bool:
        if time.monotonic() < self._paused_until:
            with self._lock:
                self.skipped += 1
            return True
        return False

    def failed(self, error: Exception) -> None:
        metrics.FAIL_OPEN_PAUSES.inc()
        with self._lock:
            self.failures += 1
            self._paused_until = time.monotonic() + FAIL_OPEN_BACKOFF
        logger.warning("Activity tracking paused for %ss: Redis unavailable (%s)", FAIL_OPEN_BACKOFF, error)

    def reset(self) -> None:
        with self._lock:
            self.failures = self.skipped = 0
            self._paused_until = 0.0


fail_open = FailOpen()


class Batches:
    """The waiting entries and the thread that sends them; started in the process that first adds
    (a forked child starts afresh: what its parent had waiting is the parent's to send)."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)
        atexit.register(self.flush)

    def _reset(self) -> None:
        self._ready = threading.Condition()
        self._sending = threading.Lock()  # one sender at a time: the thread, or a flush
        self._waiting: deque[Entry] = deque()
        self._since = 0.0  # when the oldest waiting entry's batch time began (time.monotonic)
        self._thread: threading.Thread | None = None

    def add(self, entry: Entry) -> None:
        with self._ready:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="activity-track-batches", daemon=True)
                self._thread.start()
            self._waiting.append(entry)
            if len(self._waiting) == 1:
                self._since = time.monotonic()
            while len(self._waiting) > BUFFER_MAX:
                self._waiting.popleft()
                metrics.TRACK_DROPPED.inc()
            if len(self._waiting) in (1, BATCH_SIZE):  # a batch begins, or is full
                self._ready.notify()

    def waiting(self) -> int:
        with self._ready:
            return len(self._waiting)

    def flush(self) -> None:
        """Send everything waiting now, in batches of ``BATCH_SIZE``."""
        with self._sending:
            while self._send_batch():
                pass

    def _run(self) -> None:
        """Wait for a first entry, then for its batch time or a full batch, and send one batch. What
        arrives during the send waits out its own batch time: sent at once, it made a stream of
        batches of one or two on a busy process, each paying a whole call's fixed cost."""
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._waiting)
                left = self._since + BATCH_MS / 1000 - time.monotonic()
                self._ready.wait_for(
                    lambda: not self._waiting or len(self._waiting) >= BATCH_SIZE,
                    timeout=max(left, 0.0),
                )
                if not self._waiting:
                    continue
            with self._sending:
                self._send_batch()
            # A database connection the batch opened (to read the funnels' definitions, every few
            # seconds) is this thread's: closed after it, not held idle beside the requests' own.
            connections.close_all()

    def _send_batch(self) -> bool:
        """Send one batch; False when nothing was waiting, or when Redis refused it (then what
        waited behind it is dropped too)."""
        with self._ready:
            size = min(len(self._waiting), BATCH_SIZE)
            batch = [self._waiting.popleft() for _ in range(size)]
            self._ready.notify()  # a thread waiting for this batch's time need wait no more
        if not batch:
            return False
        try:
            send(batch)
        except StoreUnavailable as error:
            with self._ready:  # the rest would fail alike: dropped now, not tried batch after batch
                metrics.TRACK_DROPPED.inc(len(batch) + len(self._waiting))
                self._waiting.clear()
            fail_open.failed(error)
            return False
        except Exception:  # the thread outlives any one batch; the error is the batch's to report
            logger.exception("a batch of %d tracked entries was not recorded", len(batch))
        return True


batches = Batches()


def record(entry: Entry) -> None:
    """Hand a request's entry to the process's batches (the test suite swaps ``batches`` for a
    backend that sends each entry before the request answers, as Sentry's tests swap a buffer)."""
    batches.add(entry)
