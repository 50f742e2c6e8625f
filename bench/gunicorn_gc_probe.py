"""gunicorn's settings for ``bench.gc_pauses``: the service's own (``project/gunicorn.conf.py``), plus
a probe in each worker that records every garbage collection (generation, start, pause) and writes
them to ``$GC_PROBE_DIR/<pid>.json`` as the worker exits."""

import gc
import json
import os
import runpy
import time
from pathlib import Path

_service = runpy.run_path(str(Path(__file__).resolve().parent.parent / "project" / "gunicorn.conf.py"))
globals().update(_service)

_collections: list[tuple[int, float, float]] = []  # (generation, epoch start, pause ms)
_started = [0.0]
_freezes: list[tuple[float, float]] = []  # the worker's collect-and-freezes: (epoch start, ms)
# The settings' own functions call the freeze through their module's globals: timed here.
# (gc.get_freeze_count() would tell too, but it walks every frozen object at each call.)
_settings_globals = _service["post_request"].__globals__
_collect_and_freeze = _settings_globals["_collect_and_freeze"]


def _timed_freeze() -> None:
    began, started = time.time(), time.perf_counter()
    _collect_and_freeze()
    _freezes.append((began, (time.perf_counter() - started) * 1000))


_settings_globals["_collect_and_freeze"] = _timed_freeze


def _record(phase: str, info: dict[str, int]) -> None:
    now = time.perf_counter()
    if phase == "start":
        _started[0] = now
    else:
        _collections.append((info["generation"], time.time() - (now - _started[0]), (now - _started[0]) * 1000))


def post_worker_init(worker: object) -> None:
    _service["post_worker_init"](worker)
    gc.callbacks.append(_record)


def worker_exit(server: object, worker: object) -> None:
    found = {"collections": _collections, "freezes": _freezes}
    Path(os.environ["GC_PROBE_DIR"], f"{os.getpid()}.json").write_text(json.dumps(found))
