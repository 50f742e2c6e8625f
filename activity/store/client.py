"""The Redis connection the service uses, and the error boundary between redis-py and the service.

Every command the store sends goes through ``Client`` (a ``redis.Redis``) or its pipelines, which
turn each redis-py error that means "Redis cannot serve now" into ``activity.errors.StoreUnavailable``:
connection errors, timeouts, and the replies of a server in a state where it refuses work (see
``SERVER_STATES``). Anything else (a bug, a wrong type) goes through unchanged. So no code above
the store needs to know redis-py's exception classes, and no call site keeps its own list.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.client import Pipeline as RedisPipeline
from redis.exceptions import NoScriptError
from redis.retry import Retry

from activity import conf, metrics
from activity.errors import StoreTimeout, StoreUnavailable
from activity.store import round_trip

# Reply codes of a server that cannot serve now, though nothing is wrong with the command:
# maxmemory reached (noeviction), a replica or a demoted primary, a dataset loading, a script or
# function running past the busy threshold, a replica cut off from its primary, a cluster missing
# slots or resharding, and min-replicas-to-write not met.
SERVER_STATES = frozenset({"OOM", "READONLY", "LOADING", "BUSY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "NOREPLICAS"})
# redis-py prefixes an error raised from a pipeline with the command that caused it.
_PIPELINE_NOTE = re.compile(r"^Command # \d+ \(.*?\) of pipeline caused error: ", re.DOTALL)


def unavailable_reason(error: BaseException) -> str | None:
    """Why ``error`` means Redis cannot serve now (a reply code, ``connection`` or ``timeout``), or None."""
    if isinstance(error, redis.TimeoutError):
        return "timeout"
    if isinstance(error, redis.ConnectionError):
        return "LOADING" if isinstance(error, redis.BusyLoadingError) else "connection"
    if isinstance(error, redis.ResponseError):
        code = error.status_code or _PIPELINE_NOTE.sub("", str(error)).split(" ", 1)[0]
        return code if code in SERVER_STATES else None
    return None


def translate(error: BaseException) -> BaseException:
    """``StoreUnavailable`` (or ``StoreTimeout``) for an error that means Redis cannot serve now;
    ``error`` itself otherwise."""
    reason = unavailable_reason(error)
    if reason is None:
        return error
    metrics.REDIS_FAILURES.labels(reason).inc()
    kind = StoreTimeout if reason == "timeout" else StoreUnavailable
    translated = kind(reason, str(error))
    translated.__cause__ = error
    return translated


class Pipeline(RedisPipeline):
    """The service's pipeline: one round trip for its commands and the request's waiting riders
    (``round_trip``), scripts by SHA without redis-py's SCRIPT EXISTS round trip, and errors that
    cross the boundary as the service's own.

    ``script()`` queues a bare EVALSHA and, only when the server answers NOSCRIPT (restart, SCRIPT
    FLUSH, failover), re-runs that one script after loading it. A command that failed with NOSCRIPT
    did nothing, so re-running it alone is safe even inside MULTI/EXEC. ``execute()`` returns the
    replies to the pipeline's own commands; the riders' go to the riders.
    """

    def __init__(self, client: Client, transaction: bool = False) -> None:
        super().__init__(client.connection_pool, client.response_callbacks, transaction, None)
        self.client = client
        self._scripts: dict[int, tuple[Any, Sequence[str], Sequence[Any]]] = {}

    def script(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> int:
        """Queue ``script`` (a ``scripts.LuaScript``); returns the index of its reply."""
        index = len(self.command_stack)
        self._scripts[index] = (script, keys, args)
        self.evalsha(script.sha, len(keys), *keys, *args)
        return index

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        mine = len(self.command_stack)
        aboard = round_trip.board(self)
        if not self.command_stack:
            return []
        metrics.REDIS_ROUND_TRIPS.inc()
        scripts = self._scripts  # execute() resets the pipeline
        try:
            results = super().execute(raise_on_error=False)
        except redis.RedisError as error:
            raise translate(error) from error
        for index, (script, keys, args) in scripts.items():
            if isinstance(results[index], NoScriptError):
                results[index] = script(self.client, keys, args)
        results = [translate(result) if isinstance(result, redis.RedisError) else result for result in results]
        if raise_on_error:
            for result in results:
                if isinstance(result, Exception):
                    raise result
        round_trip.arrive(aboard, results)
        return results[:mine]

    def reset(self) -> None:
        super().reset()
        self._scripts = {}


class Client(redis.Redis):
    """``redis.Redis`` whose commands and pipelines raise ``StoreUnavailable`` when Redis cannot serve."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if round_trip.waiting():  # the request's riders travel with its first command
            return round_trip.carry(self, args, options)
        metrics.REDIS_ROUND_TRIPS.inc()
        try:
            return super().execute_command(*args, **options)
        except redis.RedisError as error:
            raise translate(error) from error

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        return Pipeline(self, transaction)


@functools.cache
def _client(url: str, timeout: float) -> Client:
    # No automatic retries: a dead Redis must fail fast (the middleware fails open and the API
    # answers 503), and a retried pipeline could apply its commands twice.
    return Client.from_url(
        url,
        decode_responses=True,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=30,
    )


def get_client() -> Client:
    """The shared client for ``REDIS_URL`` (one connection pool per URL and timeout)."""
    return _client(conf.get("REDIS_URL"), conf.settings.REDIS_TIMEOUT)
