"""Loads ``lua/*.lua`` (in a wheel, ``activity/lua``) and runs the scripts by SHA. A plain call goes
through redis-py's ``Script``, which reloads on NOSCRIPT; in a pipeline that ``Script`` would add a
SCRIPT EXISTS round trip, so the service's pipelines queue a bare EVALSHA (``store.client``). A script
whose header names a prelude (``-- Prelude: lua/fence.lua``, the fence of ``store.idempotency``) is
sent joined after it, one script for Redis: what two scripts share is written once."""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from redis.commands.core import Script

from activity.store.client import Client, Pipeline

__all__ = ["LUA_DIR", "LuaScript", "Pipeline"]

_PACKAGED = files("activity") / "lua"
LUA_DIR = _PACKAGED if _PACKAGED.is_dir() else Path(__file__).resolve().parents[2] / "lua"
PRELUDE = re.compile(rb"^-- Prelude: lua/(\w+)\.lua", re.MULTILINE)


class LuaScript:
    """One ``lua/<name>.lua`` file, client-free; the client is passed at call time."""

    def __init__(self, name: str) -> None:
        self.name = name
        source = LUA_DIR.joinpath(f"{name}.lua").read_bytes()
        self.preludes = [found.decode() for found in PRELUDE.findall(source)]
        joined = [LUA_DIR.joinpath(f"{prelude}.lua").read_bytes() for prelude in self.preludes]
        self._script = Script(None, b"".join([*joined, source]))

    @property
    def source(self) -> bytes:
        """What the server runs (SCRIPT LOAD of it gives ``sha``)."""
        return self._script.script

    @property
    def sha(self) -> str:
        return self._script.sha

    def __call__(self, client: Client, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self._script(keys=keys, args=args, client=client)
