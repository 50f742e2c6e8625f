"""The service's application for ``bench.gc_pauses``: ``project.asgi``'s, plus a probe in each worker
that records every garbage collection (generation, start, pause) and each collect-and-freeze, written
to ``$GC_PROBE_DIR/<pid>.json`` as the worker shuts down."""

from __future__ import annotations

import gc
import json
import os
import time
from pathlib import Path

from project.asgi import Front, Message, Receive, Send
from project.asgi import application as service

_collections: list[tuple[int, float, float]] = []  # (generation, epoch start, pause ms)
_freezes: list[tuple[float, float]] = []  # the worker's collect-and-freezes: (epoch start, ms)
_started = [0.0]


def _record(phase: str, info: dict[str, int]) -> None:
    now = time.perf_counter()
    if phase == "start":
        _started[0] = now
    else:
        _collections.append((info["generation"], time.time() - (now - _started[0]), (now - _started[0]) * 1000))


class ProbedFront(Front):
    """The service's front, its freezes timed and its collections written out at shutdown."""

    def collect_and_freeze(self) -> None:
        began, started = time.time(), time.perf_counter()
        super().collect_and_freeze()
        _freezes.append((began, (time.perf_counter() - started) * 1000))

    async def lifespan(self, receive: Receive, send: Send) -> None:
        async def writing_first(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                found = {"collections": _collections, "freezes": _freezes}
                Path(os.environ["GC_PROBE_DIR"], f"{os.getpid()}.json").write_text(json.dumps(found))
            await send(message)

        await super().lifespan(receive, writing_first)


gc.callbacks.append(_record)
application = ProbedFront(service.app, service.body_limit, service.freeze_after, service.on_shutdown)
