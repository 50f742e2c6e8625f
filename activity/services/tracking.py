"""What requests leave behind, sent to Redis in batches by one thread per process: the tracking
middleware's activity, API callers' own activity, and the requests the rate limits admitted.

Sent request by request, a tracked page would cost its request a round trip, and Redis one call
of each script per view, whose fixed part outweighs the view's own work. So a request only appends
its entries here (a lock and a list append), and a daemon thread sends a batch
``BATCH_MS`` after its first entry arrived, or as soon as
``BATCH_SIZE`` entries wait: one ``ingest.record_events`` call per kind of traffic
(one round trip each, one call of each script for the whole batch), and one round trip for the
rate-limit counts. Order within a batch does not matter: last seen only moves forward, and a
session's views are sorted by time.

What it costs: activity reaches Redis up to ``BATCH_MS`` later (or, when that time
ends during the previous batch's send, right after it), and a process killed outright (SIGKILL, the
OOM killer) loses what it had not sent, at most that long of its requests. A process that exits
normally sends the rest first (``atexit``). At most ``BUFFER_MAX`` entries wait;
past that (Redis slow or away) the oldest are dropped and counted (``activity_track_dropped``). When
Redis refuses a batch, it and what waited behind it are dropped as the middleware's own failures
are: logged, counted, and tracking paused for ``FAIL_OPEN_BACKOFF`` seconds (``fail_open``;
so a process exiting while Redis is away pays one timeout). With ``BATCH_MS`` = 0
each request sends its own entries before its response returns (the tests' way of reading what a
request wrote).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from activity import metrics
from activity.errors import StoreUnavailable
from activity.events import Event
from activity.services import ingest, rate_limits
from activity.services.rate_limits import Window

logger = logging.getLogger("activity.services.tracking")

# A batch goes BATCH_MS after its first entry arrived, or once BATCH_SIZE entries wait; at most
# BUFFER_MAX wait (the oldest dropped past it, while Redis is slow or away). 0 ms: each request
# sends its own entries before it answers (the tests read what a request wrote that way).
BATCH_MS = 50
BATCH_SIZE = 500
BUFFER_MAX = 20_000
FAIL_OPEN_BACKOFF = 5  # seconds tracking pauses after Redis failed it


@dataclass(frozen=True, slots=True)
class Activity:
    """One tracked request: a signed-in user's event (and username), or an anonymous visit."""

    kind: str
    event: Event | None = None
    name: str = ""
    visitor: tuple[str, float] | None = None


@dataclass
class _Kind:
    """A batch's requests of one kind of traffic, as ``record_events`` takes them."""

    events: list[Event] = field(default_factory=list)
    visitors: list[tuple[str, float]] = field(default_factory=list)
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
    for kind, batch in kinds.items():
        ingest.record_events(batch.events, batch.visitors, batch.names, kind=kind, requests=batch.requests)


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
        """Wait for a first entry, then until its batch time has passed or the batch is full, and
        send one batch. What arrives during that send waits out its own batch time: sending it at
        once, as the next batch, made a stream of batches of one or two entries on a busy process,
        each costing about as much as twenty entries of a full one. When someone else sent the
        entries meanwhile (``flush``), the next entry starts a new batch time."""
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
    """Hand a request's entry over: to the batches, or with ``BATCH_MS`` = 0
    straight to Redis (a failure then pauses tracking here)."""
    if BATCH_MS > 0:
        batches.add(entry)
        return
    try:
        send([entry])
    except StoreUnavailable as error:
        fail_open.failed(error)
