"""Loads ``lua/*.lua`` once and runs the scripts by SHA, recovering from NOSCRIPT.

Plain calls go through redis-py's ``Script``, which reloads on NOSCRIPT. In pipelines, redis-py's
``Script`` sends SCRIPT EXISTS before every execute (an extra round trip), so ``Pipeline`` below
queues a bare EVALSHA and, only when the server answers NOSCRIPT (restart, SCRIPT FLUSH,
failover), re-runs that one script after loading it. A command that failed with NOSCRIPT did
nothing, so re-running it alone is safe even inside MULTI/EXEC. On a cluster the same holds per
node: the pipeline sends each EVALSHA to the node serving its keys' slot, and the reload (SCRIPT
LOAD) goes to every primary.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from redis.commands.core import Script
from redis.exceptions import NoScriptError

from activity.store.client import Client

LUA_DIR = Path(__file__).resolve().parents[2] / "lua"


class LuaScript:
    """One ``lua/<name>.lua`` file, client-free; the client is passed at call time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._script = Script(None, (LUA_DIR / f"{name}.lua").read_bytes())

    @property
    def sha(self) -> str:
        return self._script.sha

    def __call__(self, client: Client, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return self._script(keys=keys, args=args, client=client)


class Pipeline:
    """A redis-py pipeline whose scripts cost no extra round trip and survive NOSCRIPT."""

    def __init__(self, client: Client, transaction: bool = False) -> None:
        self.client = client
        self.pipe = client.pipeline(transaction=transaction)
        self._scripts: dict[int, tuple[LuaScript, Sequence[str], Sequence[Any]]] = {}

    def script(self, script: LuaScript, keys: Sequence[str], args: Sequence[Any]) -> int:
        """Queue ``script``; returns the index of its reply in ``execute()``'s list."""
        index = len(self.pipe)
        self._scripts[index] = (script, keys, args)
        # By name, not the ``evalsha`` method, which redis-py's cluster pipeline refuses (it routes
        # by the keys all the same, and refuses keys of two slots).
        self.pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return index

    def pfcount(self, key: str) -> int:
        """Queue the count of one HyperLogLog; returns its reply index. (redis-py's cluster pipeline
        refuses its ``pfcount`` method, which may merge keys of several slots; one key is safe.)"""
        index = len(self.pipe)
        self.pipe.execute_command("PFCOUNT", key)
        return index

    def __len__(self) -> int:
        return len(self.pipe)

    def __getattr__(self, name: str) -> Any:
        # Plain commands (rpush, expire, ...) are queued on the underlying pipeline.
        return getattr(self.pipe, name)

    def execute(self) -> list[Any]:
        """Send everything in one round trip; raise the first error after NOSCRIPT recovery."""
        results = self.pipe.execute(raise_on_error=False)
        for index, (script, keys, args) in self._scripts.items():
            if isinstance(results[index], NoScriptError):
                results[index] = script(self.client, keys, args)
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results
