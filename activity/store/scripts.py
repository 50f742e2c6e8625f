"""Loads ``lua/*.lua`` (in a wheel, ``activity/lua``) and runs the scripts by SHA. A plain call goes
through redis-py's ``Script``, which reloads on NOSCRIPT; in a pipeline that ``Script`` would add a
SCRIPT EXISTS round trip, so the service's pipelines queue a bare EVALSHA (``store.client``). A script
whose header has the ``FENCED`` line is sent joined after ``lua/fence.lua``, one script for Redis
(``store.idempotency``)."""

from __future__ import annotations

from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from redis.commands.core import Script

from activity.store.client import Client, Pipeline

__all__ = ["LUA_DIR", "LuaScript", "Pipeline"]

_PACKAGED = files("activity") / "lua"
LUA_DIR = _PACKAGED if _PACKAGED.is_dir() else Path(__file__).resolve().parents[2] / "lua"
FENCED = b"\n-- Fenced: lua/fence.lua runs first"


class LuaScript:
    """One ``lua/<name>.lua`` file, client-free; the client is passed at call time."""

    def __init__(self, name: str) -> None:
        self.name = name
        source = LUA_DIR.joinpath(f"{name}.lua").read_bytes()
        if FENCED in source:
            source = LUA_DIR.joinpath("fence.lua").read_bytes() + source
        self._script = Script(None, source)

    @property
    def source(self) -> bytes:
        """What the server runs (SCRIPT LOAD of it gives ``sha``)."""
        return self._script.script

    @property
    def sha(self) -> str:
        return self._script.sha

    def __call__(self, client: Client, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self._script(keys=keys, args=args, client=client)
