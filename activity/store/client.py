"""The store's Redis client, ``redis.Redis`` or (``ACTIVITY_REDIS_CLUSTER``) ``RedisCluster`` through
redis-py's public API, or (a ``redis+sentinel://`` ``REDIS_URL``) the primary a Redis Sentinel names,
from ``Sentinel.master_for``; and the boundary between redis-py's errors and the service's:

- every error meaning "Redis cannot serve now" becomes ``StoreUnavailable`` (``StoreTimeout``);
- scripts in a pipeline go by bare EVALSHA; a NOSCRIPT reply (it ran nothing) re-runs that script;
- a command that may have run is never sent twice: no retries, and on a cluster only redirections.
"""

from __future__ import annotations

import functools
import itertools
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeAlias

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.commands import CoreCommands
from redis.exceptions import (
    AskError,
    ClusterError,
    NoScriptError,
    RedisClusterException,
    SlotNotCoveredError,
)
from redis.retry import Retry
from redis.sentinel import Sentinel

from activity import conf, metrics
from activity.errors import StoreTimeout, StoreUnavailable

# Reply codes of a server that cannot serve now, though nothing is wrong with the command:
# maxmemory reached (noeviction), a replica or a demoted primary, a dataset loading, a script or
# function running past the busy threshold, a replica cut off from its primary, a cluster missing
# slots or resharding, min-replicas-to-write not met, writes stopped after a failed snapshot
# (stop-writes-on-bgsave-error), and a blocking command cut short (a failover, CLIENT UNBLOCK).
SERVER_STATES = frozenset(
    {
        "OOM",
        "READONLY",
        "LOADING",
        "BUSY",
        "MASTERDOWN",
        "CLUSTERDOWN",
        "TRYAGAIN",
        "NOREPLICAS",
        "MISCONF",
        "UNBLOCKED",
    }
)
# What redis-py writes before the server's reply in the message of an error it raises from a
# transaction for a command MULTI refused ("Command # 3 (EXPIRE k 60) of pipeline caused error: ").
MULTI_REFUSAL_NOTE = " of pipeline caused error: "
_ERRORS = (redis.RedisError, RedisClusterException)
# Seconds between a Sentinel client's questions to the sentinels about where the primary is (one
# SENTINEL MASTERS round trip a process, on whichever command comes due): at most this long after
# a planned failover, connections to the demoted primary are dropped (SentinelClient).
SENTINEL_RECHECK_S = 1.0


def reply_code(error: redis.ResponseError) -> str:
    """The first word of the server's error reply. redis-py keeps it as ``status_code`` on every reply
    it has a class for (OOM, READONLY, LOADING, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, NOSCRIPT, ERR, ...).
    A reply it has none for (BUSY, NOREPLICAS, MISCONF, UNBLOCKED) is the error's message: as the
    server sent it, or after ``MULTI_REFUSAL_NOTE`` when MULTI refused the command."""
    return error.status_code or str(error).rpartition(MULTI_REFUSAL_NOTE)[2].split(" ", 1)[0]


def unavailable_reason(error: BaseException | None) -> str | None:
    """Why ``error`` means Redis cannot serve now (a reply code, ``connection`` or ``timeout``), or None."""
    if isinstance(error, redis.TimeoutError):
        return "timeout"
    if isinstance(error, redis.BusyLoadingError):
        return "LOADING"
    if isinstance(error, redis.ConnectionError):
        return "connection"
    if isinstance(error, redis.ResponseError) and reply_code(error) in SERVER_STATES:
        return reply_code(error)
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


Command: TypeAlias = tuple[tuple[Any, ...], dict[str, Any]]


# Items (views, users, people, group views) per script call: a batch goes as calls of at most this
# many, all in its one round trip, so each call's keys and arguments and its time in Redis (a few ms
# at most) are bounded whatever the batch.
PER_CALL = 200


def chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in lists of at most ``size`` (``PER_CALL`` for a script call's share of a batch)."""
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


class Reply:
    """A queued command's reply, set when its pipeline executes: what a store function that queues
    hands its caller, so no caller counts positions in a pipeline's replies."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: Any = None


class Sum:
    """The sum of integer replies (a missing key's None counts as 0), known once they are."""

    __slots__ = ("replies",)

    def __init__(self, replies: Iterable[Reply] = ()) -> None:
        self.replies = list(replies)

    @property
    def value(self) -> int:
        return sum(int(reply.value or 0) for reply in self.replies)


class Pipeline(CoreCommands):
    """The service's pipeline: redis-py's command methods (``CoreCommands``, the mixin redis-py builds
    its clients from) queue here, ``script()`` queues a bare EVALSHA, and ``execute()`` hands the
    queue to redis-py's own pipeline, then raises or returns the service's errors in place of replies.
    A script that got NOSCRIPT runs again (loaded) after the whole pipeline, so steps whose order
    matters belong in one script. On a cluster it is ``ClusterPipeline``, which sends each node its
    share."""

    def __init__(self, client: Client, transaction: bool) -> None:
        self.client = client
        self.transaction = transaction
        self.command_stack: list[Command] = []
        self._scripts: dict[int, tuple[Any, Sequence[str], Sequence[Any]]] = {}
        self._replies: list[tuple[int, Reply]] = []

    def __len__(self) -> int:
        return len(self.command_stack)

    def execute_command(self, *args: Any, **options: Any) -> Pipeline:
        """Queue one command (what every command method calls)."""
        self.command_stack.append((args, options))
        return self

    def reply(self) -> Reply:
        """The reply of the command queued last, set by ``execute``."""
        handle = Reply()
        self._replies.append((len(self) - 1, handle))
        return handle

    def script(self, script: Any, keys: Sequence[str], args: Sequence[Any]) -> Reply:
        """Queue ``script`` (a ``scripts.LuaScript``) by its SHA; returns its reply, set by ``execute``."""
        self._scripts[len(self)] = (script, keys, args)
        self.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        return self.reply()

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        if not len(self):
            return []
        stack, self.command_stack = self.command_stack, []
        scripts, self._scripts = self._scripts, {}
        handles, self._replies = self._replies, []
        metrics.REDIS_ROUND_TRIPS.inc()
        try:
            results = self._send(stack)
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
        for index, handle in handles:
            handle.value = results[index]
        return results

    def _send(self, stack: list[Command]) -> list[Any]:
        """Every command's reply, or its error in its place: redis-py's pipeline on the client's pool."""
        return _run(redis.Redis.pipeline(self.client, transaction=self.transaction), stack)


def _run(pipe: redis.client.Pipeline, stack: Sequence[Command]) -> list[Any]:
    """``stack`` through redis-py's pipeline ``pipe``: the replies, each error in its command's place."""
    for args, options in stack:
        pipe.execute_command(*args, **options)
    return pipe.execute(raise_on_error=False)


@functools.cache
def _senders(pid: int) -> ThreadPoolExecutor:
    """The threads of process ``pid`` that send a cluster pipeline's shares beyond the first (threads
    do not survive a fork: a forked child makes its own)."""
    return ThreadPoolExecutor(thread_name_prefix=f"activity-cluster-send-{pid}")


class ClusterPipeline(Pipeline):
    """A redis-py pipeline per node the commands reach, all sent at once (the calling thread sends one
    node's share, ``_senders`` the others; one after another while the interpreter exits): one round
    trip in time. Not redis-py's cluster pipeline, which re-sends a command whose reply timed out
    though it ran: here only a redirection (the command did not run) is sent again. A node that
    cannot be reached fails the round trip before anything is written. With ``transaction`` the keys
    must share one slot."""

    client: ClusterClient

    def _send(self, stack: list[Command]) -> list[Any]:
        cluster = self.client
        shares: dict[str, tuple[ClusterNode, list[int]]] = {}
        for position, (args, _) in enumerate(stack):
            node = cluster.get_nodes_from_slot(args[0], *args)[0]
            shares.setdefault(node.name, (node, []))[1].append(position)
        if self.transaction:
            if len({cluster.determine_slot(*args) for args, _ in stack}) > 1:
                raise RedisClusterException("a transaction's keys must all map to the same slot")
            node, _ = next(iter(shares.values()))
            return _run(cluster.get_redis_connection(node).pipeline(transaction=True), stack)
        # Every node's connection first: a node that cannot be reached fails the whole round trip
        # before anything is written anywhere, so no batch is left half-written.
        for node, _ in shares.values():
            pool = cluster.get_redis_connection(node).connection_pool
            pool.release(pool.get_connection())
        results: list[Any] = [None] * len(stack)

        def send(node: ClusterNode, positions: list[int]) -> None:
            """One node's share; when the node fails, each of its commands gets the error."""
            pipe = cluster.get_redis_connection(node).pipeline(transaction=False)
            try:
                replies = _run(pipe, [stack[position] for position in positions])
            except _ERRORS as error:
                replies = [error] * len(positions)
            for position, reply in zip(positions, replies, strict=True):
                results[position] = reply

        first, *others = shares.values()
        sending = []
        for share in others:
            try:
                sending.append(_senders(os.getpid()).submit(send, *share))
            except RuntimeError:  # the interpreter is exiting (atexit sends what waits): no new threads
                send(*share)
        send(*first)
        for share in sending:
            share.result()
        for position, reply in enumerate(results):
            # MOVED is an AskError. TRYAGAIN (a slot mid-migration) stays the reply: the batch is
            # refused now and retried later, not spun on for the length of a migration.
            if isinstance(reply, AskError):
                args, options = stack[position]
                try:
                    results[position] = cluster.execute_command(*args, **options)
                except _ERRORS as error:
                    results[position] = error
        return results


class _ServiceErrors:
    """Mixed into both clients: a command counts its round trip and raises the service's errors."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        metrics.REDIS_ROUND_TRIPS.inc()
        try:
            return super().execute_command(*args, **options)  # type: ignore[misc]
        except _ERRORS as error:
            raise translate(error) from error


class StandaloneClient(_ServiceErrors, redis.Redis):
    """``redis.Redis`` whose commands and pipelines raise the service's errors."""

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        return Pipeline(self, transaction)


class ClusterClient(_ServiceErrors, RedisCluster):
    """``RedisCluster`` (follows MOVED and ASK, routes each command by its keys' slot) with the same
    error boundary and pipelines as ``StandaloneClient``."""

    def pipeline(self, transaction: bool = False, shard_hint: Any = None) -> ClusterPipeline:
        return ClusterPipeline(self, transaction)


class SentinelClient(StandaloneClient):
    """``StandaloneClient`` on the primary a Redis Sentinel names (``Sentinel.master_for``), which
    asks the sentinels again at most every ``SENTINEL_RECHECK_S``. Each new connection asks them
    anyway; the re-check is for the connections already open. After a planned failover (``SENTINEL
    FAILOVER``) the old primary goes on taking writes on them until the sentinels demote it, about 10 s
    later, and every write it takes meanwhile is lost when it resyncs from the new one. Once the
    address changes, the pool drops its connections to the old primary (redis-py's
    ``get_master_address``), so the next command's goes to the new one."""

    _next_check = 0.0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self._recheck()
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        self._recheck()
        return super().pipeline(transaction, shard_hint)

    def _recheck(self) -> None:
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + SENTINEL_RECHECK_S
        try:
            self.connection_pool.get_master_address()
        except redis.RedisError:
            # No sentinel answers, or none knows a primary (an election), or one refuses: the command
            # finds out for itself whether the primary it has a connection to still serves.
            self._next_check = now + SENTINEL_RECHECK_S * 5


Client: TypeAlias = StandaloneClient | ClusterClient


def client_options(timeout: float) -> dict[str, Any]:
    """What every client of the service is made with. No automatic retries: a dead Redis must fail
    fast (the middleware fails open and the API answers 503), and a retried command could be
    applied twice."""
    return dict(
        decode_responses=True,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=30,
        # RESP2 whatever redis-py's default (8 speaks RESP3, 7.4 RESP2): replies of one shape on every
        # release the range allows, and no maintenance notifications (RESP3 push messages), with
        # which redis-py skips its check that a pooled connection has no reply left unread.
        protocol=2,
    )


@functools.cache
def _client(url: str, timeout: float, cluster: bool) -> Client:
    options = client_options(timeout)
    sentinel = conf.parse_sentinel_url(url)
    if sentinel is not None:
        return _sentinel_client(sentinel, options)
    if not cluster:
        return StandaloneClient.from_url(url, **options)
    try:
        # Any node's address will do: the client reads the slot map from it and finds the rest.
        # Slots without a live node answer 503 on their own; the others keep serving.
        return ClusterClient.from_url(url, require_full_coverage=False, **options)
    except _ERRORS as error:
        raise translate(error) from error


def _sentinel_client(url: conf.SentinelURL, options: dict[str, Any]) -> SentinelClient:
    """A client of the primary the sentinels name: each new connection asks them where it is, so the
    one after a failover reaches the promoted replica (and one to a demoted primary, answering
    READONLY, is dropped). While no primary is known (the election) a command raises a connection
    error, which is ``StoreUnavailable`` here like any other; nothing is retried. The sentinels get
    the same timeouts and no credentials (``conf.SentinelURL``)."""
    to_sentinels = {
        "socket_timeout": options["socket_timeout"],
        "socket_connect_timeout": options["socket_connect_timeout"],
        "retry": Retry(NoBackoff(), 0),
    }
    sentinels = Sentinel(list(url.sentinels), sentinel_kwargs=to_sentinels)
    credentials = {"username": url.username, "password": url.password}
    return sentinels.master_for(url.service, redis_class=SentinelClient, db=url.db, **credentials, **options)


def get_client() -> Client:
    """The shared client for ``REDIS_URL`` (one per URL, timeout and mode): a cluster client when
    ``ACTIVITY_REDIS_CLUSTER`` is set, the current primary's for a ``redis+sentinel://`` URL."""
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
