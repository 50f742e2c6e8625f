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
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.client import Pipeline as RedisPipeline
from redis.retry import Retry

from activity import conf
from activity.errors import StoreTimeout, StoreUnavailable

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
    kind = StoreTimeout if reason == "timeout" else StoreUnavailable
    translated = kind(reason, str(error))
    translated.__cause__ = error
    return translated


class ClientPipeline(RedisPipeline):
    """A redis-py pipeline whose errors cross the boundary as the service's own."""

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        try:
            results = super().execute(raise_on_error)
        except redis.RedisError as error:
            raise translate(error) from error
        return [translate(result) if isinstance(result, redis.RedisError) else result for result in results]


class Client(redis.Redis):
    """``redis.Redis`` whose commands and pipelines raise ``StoreUnavailable`` when Redis cannot serve."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute_command(*args, **options)
        except redis.RedisError as error:
            raise translate(error) from error

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> ClientPipeline:
        return ClientPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


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
