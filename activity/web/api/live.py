"""The live stream's process side (docs/live.md): one ``Feed`` per event loop polls the figures once
a second while at least one stream listens and hands each change to every stream of the process;
each stream (``events``) is an async generator, so an open stream holds no thread, only its socket
and a few objects. A stream sends ``stats`` at once and on each change (the feed changes at most
once a second), a comment every ``HEARTBEAT_S`` so proxies and dead peers are found, and ends once
its caller may no longer read it (checked every ``RECHECK_S``, with the database at most that often a caller)."""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import orjson

from activity import metrics
from activity.errors import StoreUnavailable
from activity.services import live
from activity.web.api.authentication import STANDING_TTL

logger = logging.getLogger("activity.web.live")

POLL_S = 1.0  # seconds between the feed's reads of Redis
HEARTBEAT_S = 15.0  # seconds between comment lines, so proxies and dead peers are found
RECHECK_S = STANDING_TTL  # seconds between checks that the caller may still read the stream (two a token period)
KEEP_ALIVE = b": keep-alive\n\n"
MEDIA_TYPE = "text/event-stream"
# Set in a WSGI environ by a server that sends an asynchronous answer from its event loop as it comes
# (project/asgi.py's front); any other WSGI server would read the stream to its end on a thread.
ASYNC_STREAMING = "activity.async_streaming"


def stats_event(data: Any) -> bytes:
    """A ``stats`` event of the stream: ``data`` as one line of JSON."""
    return b"event: stats\ndata: " + orjson.dumps(data) + b"\n\n"


class Feed:
    """Reads ``read()`` (blocking, on a worker thread) ``interval`` seconds after each read while someone
    listens: ``latest`` is the last event read, ``version`` counts its changes, and every stream
    wakes once a read (``tick``), to send a change or what else is due: one wake a stream and
    second, no timer per stream."""

    def __init__(self, read: Callable[[], Any] = live.snapshot, interval: float = POLL_S) -> None:
        self.read = read
        self.interval = interval
        self.latest: bytes | None = None
        self.version = 0
        self.listeners = 0
        self._tick = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None

    @asynccontextmanager
    async def listening(self) -> AsyncIterator[Feed]:
        """Count a listener for as long as the block runs: the first starts the poller, and the
        poller stops once the last has gone."""
        self.listeners += 1
        metrics.LIVE_STREAMS_OPENED.inc()
        if not self.polling:
            self._poller = asyncio.get_running_loop().create_task(self._poll())
        try:
            yield self
        finally:
            self.listeners -= 1
            metrics.LIVE_STREAMS_CLOSED.inc()

    @property
    def polling(self) -> bool:
        """Whether the feed reads Redis now (from the first listener until the last has gone)."""
        return self._poller is not None and not self._poller.done()

    async def tick(self) -> None:
        """Return after the next read."""
        await self._tick.wait()

    async def _poll(self) -> None:
        while self.listeners:
            try:
                event = stats_event(await asyncio.to_thread(self.read))
            except StoreUnavailable as error:  # the streams keep their last figures and their heartbeats
                logger.warning("live feed: %s", error)
            else:
                if event != self.latest:
                    self.latest, self.version = event, self.version + 1
            self._tick.set()
            self._tick = asyncio.Event()
            await asyncio.sleep(self.interval)  # a full interval after each read: never two events closer


_feeds: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Feed] = weakref.WeakKeyDictionary()


def feed() -> Feed:
    """The running event loop's feed (a server runs one loop per process)."""
    loop = asyncio.get_running_loop()
    if loop not in _feeds:
        _feeds[loop] = Feed()
    return _feeds[loop]


async def events(allowed: Callable[[], Awaitable[bool]], source: Feed | None = None) -> AsyncIterator[bytes]:
    """One client's stream: its bytes as they are due, until ``allowed()`` says no or the server
    cancels it (the client went away). ``source`` defaults to the loop's feed."""
    loop = asyncio.get_running_loop()
    source = source or feed()
    async with source.listening():
        now = loop.time()
        next_beat, next_check = now + HEARTBEAT_S, now + RECHECK_S
        sent = -1  # the version sent last
        while True:
            if source.latest is not None and source.version != sent:
                sent = source.version
                yield source.latest
            now = loop.time()
            if now >= next_check:
                if not await allowed():
                    return
                next_check = now + RECHECK_S
            if now >= next_beat:
                yield KEEP_ALIVE
                next_beat = now + HEARTBEAT_S
            await source.tick()
