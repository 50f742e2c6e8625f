"""Loads ``lua/*.lua`` once and runs the scripts by SHA, recovering from NOSCRIPT.

The scripts are the repository's top-level ``lua/``; the wheel carries them as ``activity/lua``
(``pyproject.toml``'s ``force-include``), so an installed app reads them from the package.

Plain calls go through redis-py's ``Script``, which reloads on NOSCRIPT. In pipelines, redis-py's
``Script`` sends SCRIPT EXISTS before every execute (an extra round trip), so the service's own
pipelines (``client.pipeline()``; their type ``Pipeline`` is importable from here too) queue a bare
EVALSHA and recover from NOSCRIPT themselves. On a cluster the same holds per node: the pipeline
sends each EVALSHA to the node serving its keys' slot, and the reload (SCRIPT LOAD) goes to every
primary.
"""

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


class LuaScript:
    """One ``lua/<name>.lua`` file, client-free; the client is passed at call time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._script = Script(None, LUA_DIR.joinpath(f"{name}.lua").read_bytes())

    @property
    def sha(self) -> str:
        return self._script.sha

    def __call__(self, client: Client, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self._script(keys=keys, args=args, client=client)
