"""The Redis connection the service uses, and the error boundary between redis-py and the service.

Every command the store sends goes through ``StandaloneClient`` (a ``redis.Redis``) or, with
``ACTIVITY_REDIS_CLUSTER``, ``ClusterClient`` (a ``redis.cluster.RedisCluster``), or their pipelines;
``Client`` names either in the store's signatures. This module is the one place that knows which.
Both turn each redis-py error that means "Redis cannot serve now" into
``activity.errors.StoreUnavailable``: connection errors, timeouts, the replies of a server in a state
where it refuses work (see ``SERVER_STATES``) and, on a cluster, a slot no reachable node serves.
Anything else (a bug, a wrong type, keys of one command spanning slots) goes through unchanged. So no
code above the store needs to know redis-py's exception classes, and no call site keeps its own list.

Every API request and every batch of tracked pages is one round trip, so what the client spends
around the socket is paid per request: on a standalone server the pool (``ServicePool``) and the
pipelines' write and read (``StandalonePipeline``) leave out redis-py 8's per-round-trip metrics
bookkeeping, which the service does not use (``bench.redis_client``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from typing import Any, TypeAlias

import redis
from redis._parsers.commands import CommandPolicies, RequestPolicy, ResponsePolicy
from redis.backoff import NoBackoff
from redis.client import Pipeline as RedisPipeline
from redis.cluster import ClusterPipeline, PipelineStrategy, RedisCluster
from redis.commands.policies import BasePolicyResolver, PolicyResolver, StaticPolicyResolver
from redis.connection import AbstractConnection, ConnectionPool
from redis.exceptions import (
    AskError,
    ClusterError,
    NoScriptError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)
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
_ERRORS = (redis.RedisError, RedisClusterException)


def unavailable_reason(error: BaseException | None) -> str | None:
    """Why ``error`` means Redis cannot serve now (a reply code, ``connection`` or ``timeout``), or None."""
    if isinstance(error, redis.TimeoutError):
        return "timeout"
    if isinstance(error, redis.ConnectionError):
        return "LOADING" if isinstance(error, redis.BusyLoadingError) else "connection"
    if isinstance(error, redis.ResponseError):
        code = error.status_code or _PIPELINE_NOTE.sub("", str(error)).split(" ", 1)[0]
        if code in SERVER_STATES:
            return code
    if isinstance(error, (ClusterError, SlotNotCoveredError)):
        return "CLUSTERDOWN"  # redirections exhausted, or a slot that no known node serves
    if isinstance(error, RedisClusterException):
        # The cluster client found no node to ask ("cannot be connected"): say why it could not.
        return unavailable_reason(error.__cause__)
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


class _Boundary:
    """Mixed into a client: every command raises the service's errors, not redis-py's."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if round_trip.waiting():  # the request's riders travel with its first command
            return round_trip.carry(self, args, options)
        metrics.REDIS_ROUND_TRIPS.inc()
        try:
            return super().execute_command(*args, **options)  # type: ignore[misc]
        except _ERRORS as error:
            raise translate(error) from error


class _ServicePipeline:
    """Mixed into a pipeline: one round trip for its commands and the request's waiting riders
    (``round_trip``), scripts by SHA without redis-py's SCRIPT EXISTS round trip, and errors, raised
    or returned in place of a reply, that cross the boundary as the service's own.

    ``script()`` queues a bare EVALSHA and, only when the server answers NOSCRIPT (restart, SCRIPT
    FLUSH, failover), re-runs that one script after loading it. A command that failed with NOSCRIPT
    did nothing, so re-running it alone is safe even inside MULTI/EXEC. ``execute()`` returns the
    replies to the pipeline's own commands; the riders' go to the riders.
    """

    riders_in_transactions = True  # a MULTI block may take the riders' commands too

    def _attach(self, client: Client, transaction: bool) -> _ServicePipeline:
        self.client = client
        self.in_transaction = transaction
        self._scripts: dict[int, tuple[Any, Sequence[str], Sequence[Any]]] = {}
        return self

    def script(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> int:
        """Queue ``script`` (a ``scripts.LuaScript``); returns the index of its reply. By name,
        not the ``evalsha`` method, which redis-py's cluster pipeline refuses (it routes by the
        keys all the same, and refuses keys of two slots)."""
        index = len(self)
        self._scripts[index] = (script, keys, args)
        self.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return index

    def pfcount(self, key: str) -> int:
        """Queue the count of one HyperLogLog; returns its reply index. (redis-py's cluster pipeline
        refuses its ``pfcount`` method, which may merge keys of several slots; one key is safe.)"""
        index = len(self)
        self.execute_command("PFCOUNT", key)
        return index

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        mine = len(self)
        boards = self.riders_in_transactions or not self.in_transaction
        aboard = round_trip.board(self) if boards else []
        if not len(self):
            return []
        metrics.REDIS_ROUND_TRIPS.inc()
        scripts = self._scripts  # execute() resets the pipeline
        try:
            results = self._send_all()
        except _ERRORS as error:
            raise translate(error) from error
        for index, (script, keys, args) in scripts.items():
            if isinstance(results[index], NoScriptError):
                results[index] = script(self.client, keys, args)
        results = [translate(result) if isinstance(result, _ERRORS) else result for result in results]
        if raise_on_error:
            for result in results:
                if isinstance(result, Exception):
                    raise result
        round_trip.arrive(aboard, results)
        return results[:mine]

    def _send_all(self) -> list[Any]:
        """Every queued command's reply (or its error), in order: one write and one read."""
        return super().execute(raise_on_error=False)  # type: ignore[misc]

    def reset(self) -> None:
        super().reset()  # type: ignore[misc]
        self._scripts = {}


class ServicePool(ConnectionPool):
    """redis-py's connection pool without its per-checkout metrics.

    redis-py 8 records four OpenTelemetry connection counts and dispatches a release event on every
    checkout and return, looking for a meter provider each time even when none is configured:
    about 39,000 of the 204,000 instructions a pipelined round trip costs (``bench.redis_client``).
    This keeps what the pool is for: one connection per concurrent user, created on demand,
    reconnected when it was left with an unread reply or closed, and never shared across a fork."""

    def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        self._checkpid()
        with self._lock:
            connection = self._available_connections.pop() if self._available_connections else self.make_connection()
            self._in_use_connections.add(connection)
        try:
            connection.connect()
            try:
                ready = not connection.can_read()  # readable: a reply left unread
            except (redis.ConnectionError, redis.TimeoutError, OSError):  # closed by the server (a restart)
                ready = False
            if not ready:
                connection.disconnect()
                connection.connect()
        except BaseException:
            self.release(connection)
            raise
        return connection

    def release(self, connection: AbstractConnection) -> None:
        self._checkpid()
        with self._lock:  # after a fork _checkpid() emptied the pool: the parent's connections are not in it
            if connection in self._in_use_connections:
                self._in_use_connections.remove(connection)
                self._available_connections.append(connection)


class StandalonePipeline(_ServicePipeline, RedisPipeline):
    """The service's pipeline on a standalone server.

    Without MULTI/EXEC (every request's round trip) it writes and reads through redis-py's own
    connection and reply parsing, but not ``Pipeline.execute``: that wraps every round trip in
    bookkeeping the service has no use for (a retry closure, which the service turns off; an
    operation-duration record and HIMPORT fieldset preparation, redis-py 8). With ``ServicePool``
    a round trip costs 0.70x redis-py's instructions, the riders and the round-trip counter
    included (``bench.redis_client``). Transactions, WATCH and redis-py's own ``Script`` objects
    keep redis-py's path."""

    def _send_all(self) -> list[Any]:
        if self.transaction or self.explicit_transaction or self.watching or self.scripts:
            return super()._send_all()
        stack, connection = self.command_stack, self.connection_pool.get_connection()
        try:
            connection.send_packed_command(connection.pack_commands([args for args, _ in stack]))
            replies: list[Any] = []
            for args, options in stack:
                try:
                    replies.append(self.parse_response(connection, args[0], **options))
                except redis.ResponseError as error:
                    replies.append(error)
            return replies
        except BaseException:
            connection.disconnect()  # replies may be left unread: never hand this socket out again as is
            raise
        finally:
            self.connection_pool.release(connection)
            self.reset()


class StandaloneClient(_Boundary, redis.Redis):
    """``redis.Redis`` whose commands and pipelines raise ``StoreUnavailable`` when Redis cannot serve."""

    @classmethod
    def from_url(cls, url: str, **options: Any) -> StandaloneClient:
        """As ``redis.Redis.from_url``, on the service's pool (which ``close()`` closes)."""
        return cls.from_pool(ServicePool.from_url(url, **options))

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> StandalonePipeline:
        pipe = StandalonePipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        return pipe._attach(self, transaction)


class _NoReplay(PipelineStrategy):
    """A cluster pipeline (commands grouped by node, one write and read per node) that never sends
    a command twice. redis-py re-sends every command whose reply was a connection error or timeout
    one by one, but such a command may have run (a script, an INCR: applied twice); only the
    redirections (MOVED, ASK, TRYAGAIN), which say the command did not run, are re-sent here."""

    def send_cluster_commands(self, stack: list[Any], raise_on_error: bool = True, allow_redirections: bool = True):
        super().send_cluster_commands(stack, raise_on_error=False, allow_redirections=False)
        for command in stack:
            if isinstance(command.result, (AskError, TryAgainError)):  # MOVED is an AskError
                try:
                    command.result = self._pipe.parent_execute_command(*command.args, **command.options)
                except _ERRORS as error:
                    command.result = error
        results = [command.result for command in sorted(stack, key=lambda command: command.position)]
        first_error = next((result for result in results if isinstance(result, Exception)), None)
        if raise_on_error and first_error is not None:
            raise first_error
        return results


class _ScriptsByTheirKeys(BasePolicyResolver):
    """Routes EVALSHA to the node of its keys' slot straight away. Without it redis-py's cluster
    pipeline first asks the server which arguments are keys (COMMAND GETKEYS): one more round trip
    for every script queued in a pipeline."""

    KEYED = CommandPolicies(request_policy=RequestPolicy.DEFAULT_KEYED, response_policy=ResponsePolicy.DEFAULT_KEYED)

    def __init__(self, fallback: PolicyResolver | None = None) -> None:
        super().__init__({"core": {"evalsha": self.KEYED}}, fallback or StaticPolicyResolver())

    def with_fallback(self, fallback: PolicyResolver) -> PolicyResolver:
        return _ScriptsByTheirKeys(fallback)


class ClusterClientPipeline(_ServicePipeline, ClusterPipeline):
    """The service's pipeline on a cluster: commands of any slots without ``transaction``; with it,
    MULTI/EXEC on the one node that serves the slot all its keys share (keys of two slots:
    ``CrossSlotTransactionError``), so riders never board a MULTI there."""

    riders_in_transactions = False

    def __init__(self, *args: Any, transaction: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, transaction=transaction, **kwargs)
        if not transaction:
            self._execution_strategy = _NoReplay(self)


class ClusterClient(_Boundary, RedisCluster):
    """``RedisCluster`` (follows MOVED / ASK, routes each command by its keys' slot) with the same
    error boundary as ``StandaloneClient``."""

    def pipeline(self, transaction: bool = False, shard_hint: Any = None) -> ClusterClientPipeline:
        if shard_hint:
            raise ValueError("shard_hint has no meaning on a cluster")
        pipe = ClusterClientPipeline(
            nodes_manager=self.nodes_manager,
            commands_parser=self.commands_parser,
            startup_nodes=self.nodes_manager.startup_nodes,
            result_callbacks=self.result_callbacks,
            cluster_response_callbacks=self.cluster_response_callbacks,
            read_from_replicas=self.read_from_replicas,
            load_balancing_strategy=self.load_balancing_strategy,
            reinitialize_steps=self.reinitialize_steps,
            retry=self.retry,
            lock=self._lock,
            transaction=transaction,
            policy_resolver=self._policy_resolver,
            event_dispatcher=self._event_dispatcher,
        )
        return pipe._attach(self, transaction)


# What the store's functions take: either client, and either's pipeline (``client.pipeline()``);
# both speak redis-py's command API.
Client: TypeAlias = StandaloneClient | ClusterClient
Pipeline: TypeAlias = StandalonePipeline | ClusterClientPipeline


@functools.cache
def _client(url: str, timeout: float, cluster: bool) -> Client:
    # No automatic retries: a dead Redis must fail fast (the middleware fails open and the API
    # answers 503), and a retried pipeline could apply its commands twice.
    options: dict[str, Any] = dict(
        decode_responses=True,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=30,
    )
    if not cluster:
        return StandaloneClient.from_url(url, **options)
    try:
        # Any node's address will do: the client reads the slot map from it and finds the rest.
        # Slots without a live node answer 503 on their own; the others keep serving.
        return ClusterClient.from_url(
            url, require_full_coverage=False, policy_resolver=_ScriptsByTheirKeys(), **options
        )
    except _ERRORS as error:
        raise translate(error) from error


def get_client() -> Client:
    """The shared client for ``REDIS_URL`` (one per URL, timeout and mode): a cluster client when
    ``ACTIVITY_REDIS_CLUSTER`` is set."""
    return _client(conf.get("REDIS_URL"), conf.settings.REDIS_TIMEOUT, conf.settings.REDIS_CLUSTER)


def is_cluster(client: Client) -> bool:
    return isinstance(client, RedisCluster)


def scan_steps(client: Client, match: str, count: int) -> Iterator[list[str]]:
    """The keys of each SCAN step matching ``match``; on a cluster, every primary's keyspace in turn
    (SCAN walks one server's keys)."""
    for node in client.get_primaries() if is_cluster(client) else [None]:
        on_node = {} if node is None else {"target_nodes": node}
        cursor = 0
        while True:
            cursor, found = client.scan(cursor, match=match, count=count, **on_node)
            if node is not None:
                cursor = cursor[node.name]  # a cluster client answers {node: cursor}
            yield found
            if cursor == 0:
                break


def cluster_state(client: Client) -> str | None:
    """None on a standalone server; on a cluster, ``ok`` with its size, else what is wrong, as each
    primary sees it (CLUSTER INFO on every primary; a primary that does not answer raises
    ``StoreUnavailable``)."""
    if not is_cluster(client):
        return None
    primaries = client.get_primaries()
    for node in primaries:
        info = client.cluster_info(target_nodes=node)
        if info["cluster_state"] != "ok":
            return f"{info['cluster_state']} on {node.name}: {info['cluster_slots_ok']} of 16384 slots ok"
    return f"ok: {len(primaries)} primaries, {info['cluster_slots_ok']} of 16384 slots ok"
