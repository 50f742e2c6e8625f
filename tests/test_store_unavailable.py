"""Redis answers but cannot serve: each server state in which a real redis-server refuses work.

Every state is produced for real on throwaway servers started here (never the run's main server):
OOM (maxmemory reached under noeviction), READONLY (a replica), BUSY (a script past the busy
threshold), MASTERDOWN (a replica cut off from its primary, not serving stale data), NOREPLICAS
(min-replicas-to-write not met), MISCONF (a snapshot that failed) and LOADING (a dataset being
loaded). In each one the service must answer 503 with Retry-After (the throttle, whose counters
live on the same server, lets requests through when it cannot count, so the views' own Redis calls
are reached), /healthz must say Redis is not ok, the tracking middleware must fail open, the ingest
task must ask for a retry, nothing may be half-written, and everything must work again as soon as
the state ends.

The states of a cluster (CLUSTERDOWN, TRYAGAIN) are tests/test_cluster.py's, UNBLOCKED (a blocked
lock waiter cut short) tests/test_locks.py's; here every reply is also checked against the store's
classifier, parsed the way redis-py parses it.
"""

from __future__ import annotations

import contextlib
import pickle
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from celery.exceptions import Retry
from django.test import override_settings

from activity.errors import StoreUnavailable
from activity.services.tracking import fail_open
from activity.store.client import StandaloneClient, client_options, unavailable_reason
from activity.tasks import record_events
from project.redis_server import PrivateRedis, free_port
from tests.celery_procs import wait_for
from tests.clients import Client

pytestmark = [pytest.mark.urls("tests.pages"), pytest.mark.django_db]

EVENTS = "/api/v1/events/"
REPORT = "/api/v1/reports/most-active/"
LAST_SEEN = "/api/v1/users/s1/last-seen/"

# Keys of this file's own (the OOM filler, probes) start with this; the snapshots of the service's
# keys leave them out.
OWN = "acttest-state"
FILLER = f"{OWN}-filler"
PROBE = f"{OWN}-probe"
WRITE_SCRIPT = "redis.call('SET', KEYS[1], ARGV[1]) return 1"
# A script that writes nothing (so SCRIPT KILL can stop it) and runs until ARGV[1] seconds from now.
BUSY_SCRIPT = """
local deadline = tonumber(redis.call('TIME')[1]) + tonumber(ARGV[1])
while tonumber(redis.call('TIME')[1]) < deadline do end
return 1
"""
BUSY_SECONDS = 10  # far longer than the checks; SCRIPT KILL ends it
FILL_MARGIN = 256 * 1024  # maxmemory starts this far above used_memory
FILL_STEP = 1024 * 1024  # each filler write grows it by this much
LOADING_KEYS = 5000  # loaded at LOADING_KEY_DELAY_US each: far longer than the checks
LOADING_KEY_DELAY_US = 5000


def serving(url: str) -> override_settings:
    """Point the service (its throttle counters included) at ``url``."""
    return override_settings(REDIS_URL=url)


def plain(url: str, **options) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5, **options)


def content(raw: redis.Redis, key: bytes) -> object:
    """What ``key`` holds, compared by value: DUMP would differ for an equal set reloaded in another
    order (Loading's DEBUG RELOAD)."""
    kind = raw.type(key)
    if kind == b"set":
        return sorted(raw.smembers(key))
    if kind == b"hash":
        return sorted(raw.hgetall(key).items())
    if kind == b"zset":
        return raw.zrange(key, 0, -1, withscores=True)
    if kind == b"list":
        return raw.lrange(key, 0, -1)
    return raw.dump(key)


def snapshot(raw: redis.Redis) -> dict[bytes, tuple[object, bool]]:
    """Every key of the service on the server: its content and whether it has a TTL.

    Not the expiry time itself: under OOM a non-transactional pipeline's EXPIRE (not a "denyoom"
    command) is still let in while the write beside it is refused, which moves a TTL, harmlessly.
    """
    return {
        key: (content(raw, key), raw.pexpiretime(key) > 0)
        for key in raw.scan_iter(count=1000)
        if not key.startswith(OWN.encode())
    }


def refusal(call) -> redis.RedisError:
    """The error ``call`` raises (it must raise one)."""
    with pytest.raises(redis.RedisError) as raised:
        call()
    return raised.value


# --- the states -------------------------------------------------------------------------------


class State:
    """One server state. ``url`` is where the service points, ``raw`` a plain client to it.

    ``enter``/``leave`` put the server in and out of the state; ``close`` cleans up whatever
    happened (stops extra servers, restores configuration). ``codes`` are the reply codes the
    state answers; ``refused`` is a raw call the state refuses with ``code``. ``serves_reads``:
    plain reads still work (so a read-only endpoint may find nothing rather than fail).
    """

    code: str
    codes: frozenset[str]
    serves_reads: bool

    def __init__(self, primary: PrivateRedis) -> None:
        self.primary = primary
        self.url = primary.url
        self.raw = plain(self.url)

    def seeded(self) -> None:
        """Called after the service wrote its seed data at ``seed_url``."""

    @property
    def seed_url(self) -> str:
        return self.url

    def enter(self) -> None:
        raise NotImplementedError

    def leave(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def refused(self) -> redis.RedisError:
        return refusal(lambda: self.raw.set(PROBE, "1"))


class OutOfMemory(State):
    code, codes, serves_reads = "OOM", frozenset({"OOM"}), True

    def enter(self) -> None:
        self.raw.config_set("maxmemory-policy", "noeviction")
        self.raw.config_set("maxmemory", int(self.raw.info("memory")["used_memory"]) + FILL_MARGIN)

        # SETRANGE past the end grows the filler by FILL_STEP with a tiny request, so the last write
        # that is let in ends well above maxmemory (an APPEND of a big chunk would be refused while
        # its own request buffer counts, leaving the server just below the limit, where a client
        # disconnecting frees enough for small writes to pass again).
        def full() -> bool:
            try:
                self.raw.setrange(FILLER, self.raw.strlen(FILLER) + FILL_STEP, b"x")
            except redis.OutOfMemoryError:
                return True
            return False

        wait_for(full, timeout=5, what="a write answering OOM")

    def leave(self) -> None:
        self.raw.config_set("maxmemory", 0)
        self.raw.delete(FILLER)

    def close(self) -> None:
        self.leave()


class ReadOnlyReplica(State):
    """A replica of the primary; the service points at the replica. Leaving = promoting it."""

    code, codes, serves_reads = "READONLY", frozenset({"READONLY"}), True

    def __init__(self, primary: PrivateRedis) -> None:
        super().__init__(primary)
        self.replica = PrivateRedis(args=["--replicaof", "127.0.0.1", str(primary.port)]).start()
        self.url = self.replica.url
        self.raw = plain(self.url)

    @property
    def seed_url(self) -> str:
        return self.primary.url

    def seeded(self) -> None:
        # The seed has reached the replica once the replica's offset is the primary's. (Not WAIT: on a
        # connection that wrote nothing it answers at once, before the seed has travelled.)
        written = plain(self.primary.url).info("replication")["master_repl_offset"]
        wait_for(
            lambda: self.raw.info("replication").get("slave_repl_offset", -1) >= written,
            timeout=5,
            what="the seed on the replica",
        )

    def enter(self) -> None:
        wait_for(lambda: self.raw.info("replication")["master_link_status"] == "up", timeout=5, what="replica link up")

    def leave(self) -> None:
        self.raw.replicaof("NO", "ONE")

    def close(self) -> None:
        self.replica.stop()


class BusyScript(State):
    """A long script (no writes) runs on its own connection past a lowered busy threshold."""

    code, codes, serves_reads = "BUSY", frozenset({"BUSY"}), False

    def __init__(self, primary: PrivateRedis) -> None:
        super().__init__(primary)
        self.thread: threading.Thread | None = None
        self.outcome: object = None

    def _run(self) -> None:
        runner = redis.Redis.from_url(self.url, socket_timeout=None)
        try:
            self.outcome = runner.eval(BUSY_SCRIPT, 0, BUSY_SECONDS)
        except redis.RedisError as error:
            self.outcome = error
        finally:
            runner.close()

    def enter(self) -> None:
        self.raw.config_set("busy-reply-threshold", 100)
        self.thread = threading.Thread(target=self._run, name="busy-script", daemon=True)
        self.thread.start()

        def busy() -> bool:
            try:
                self.raw.get(PROBE)
            except redis.ResponseError as error:
                return str(error).startswith("BUSY")
            return False

        wait_for(busy, timeout=5, what="the server answering BUSY")

    def leave(self) -> None:
        assert self.raw.script_kill()
        assert self.thread is not None
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()
        assert "Script killed" in str(self.outcome)

    def close(self) -> None:
        if self.thread is not None and self.thread.is_alive():
            with contextlib.suppress(redis.ResponseError):  # NOTBUSY: it ended meanwhile
                self.raw.script_kill()
            self.thread.join(timeout=BUSY_SECONDS + 5)
        self.raw.config_set("busy-reply-threshold", 5000)

    def refused(self) -> redis.RedisError:
        return refusal(lambda: self.raw.get(PROBE))


class MasterDown(State):
    """A server of its own, told to replicate a port where nothing listens, not serving stale data.

    Writes to it answer READONLY, everything else MASTERDOWN. Leaving = REPLICAOF NO ONE.
    """

    code, codes, serves_reads = "MASTERDOWN", frozenset({"MASTERDOWN", "READONLY"}), False

    def __init__(self, primary: PrivateRedis) -> None:
        super().__init__(primary)
        self.server = PrivateRedis(args=["--replica-serve-stale-data", "no"]).start()
        self.url = self.server.url
        self.raw = plain(self.url)

    def enter(self) -> None:
        self.raw.replicaof("127.0.0.1", free_port())
        assert self.raw.info("replication")["master_link_status"] == "down"

    def leave(self) -> None:
        self.raw.replicaof("NO", "ONE")

    def close(self) -> None:
        self.server.stop()

    def refused(self) -> redis.RedisError:
        return refusal(lambda: self.raw.get(PROBE))


class NoReplicas(State):
    code, codes, serves_reads = "NOREPLICAS", frozenset({"NOREPLICAS"}), True

    def enter(self) -> None:
        self.raw.config_set("min-replicas-to-write", 1)

    def leave(self) -> None:
        self.raw.config_set("min-replicas-to-write", 0)

    def close(self) -> None:
        self.leave()


class SnapshotFailed(State):
    """A snapshot that could not be written, with a save point and stop-writes-on-bgsave-error on
    (Redis's defaults for a server that persists): every write answers MISCONF until one succeeds.
    The snapshot fails because its directory is /proc, where no file can be made."""

    code, codes, serves_reads = "MISCONF", frozenset({"MISCONF"}), True

    def __init__(self, primary: PrivateRedis) -> None:
        super().__init__(primary)
        self.dir = self.raw.config_get("dir")["dir"]

    def _save_until(self, status: bytes) -> None:
        self.raw.bgsave()
        deadline = time.monotonic() + 10
        while (
            self.raw.info("persistence")["rdb_last_bgsave_status"] != status.decode()
            or self.raw.info("persistence")["rdb_bgsave_in_progress"]
        ):
            assert time.monotonic() < deadline, f"no snapshot ended {status!r}"
            time.sleep(0.02)

    def enter(self) -> None:
        self.raw.config_set("save", "3600 1")
        self.raw.config_set("dir", "/proc")
        self._save_until(b"err")

    def leave(self) -> None:
        self.raw.config_set("dir", self.dir)
        self._save_until(b"ok")

    def close(self) -> None:
        self.raw.config_set("dir", self.dir)
        self.raw.config_set("save", "")


class Loading(State):
    """A dataset being loaded (as after a restart): DEBUG RELOAD saves and loads it again, each key's
    load slowed by ``key-load-delay`` and the server answering others between keys, so it stays in
    LOADING until ``leave`` lifts the delay (CONFIG is served while loading)."""

    code, codes, serves_reads = "LOADING", frozenset({"LOADING"}), False

    def __init__(self, primary: PrivateRedis) -> None:
        super().__init__(primary)
        self.thread: threading.Thread | None = None

    def seeded(self) -> None:
        self.raw.execute_command("DEBUG", "POPULATE", LOADING_KEYS, FILLER, 100)

    def _reload(self) -> None:
        with redis.Redis.from_url(self.url, socket_timeout=60) as runner:
            runner.execute_command("DEBUG", "RELOAD")

    def enter(self) -> None:
        self.raw.config_set("loading-process-events-interval-bytes", 1024)
        self.raw.config_set("key-load-delay", LOADING_KEY_DELAY_US)
        self.thread = threading.Thread(target=self._reload, name="debug-reload", daemon=True)
        self.thread.start()

        def loading() -> bool:
            try:
                self.raw.get(PROBE)
            except redis.BusyLoadingError:
                return True
            return False

        wait_for(loading, timeout=5, what="the server answering LOADING")

    def leave(self) -> None:
        self.raw.config_set("key-load-delay", 0)
        assert self.thread is not None
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()

    def close(self) -> None:
        self.leave()

    def refused(self) -> redis.RedisError:
        return refusal(lambda: self.raw.get(PROBE))


STATES = [OutOfMemory, ReadOnlyReplica, BusyScript, MasterDown, NoReplicas, SnapshotFailed, Loading]


@pytest.fixture(scope="module")
def primary() -> Iterator[PrivateRedis]:
    """The file's own throwaway server (the states' primary), never the run's main server."""
    # SnapshotFailed moves its dir; Loading runs DEBUG RELOAD.
    server = PrivateRedis(args=["--enable-protected-configs", "yes", "--enable-debug-command", "yes"]).start()
    try:
        plain(server.url).config_set("repl-diskless-sync-delay", 0)  # a new replica syncs at once
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_primary(primary: PrivateRedis) -> PrivateRedis:
    plain(primary.url).flushall()  # all of it is this file's own data
    return primary


# --- the checks -------------------------------------------------------------------------------


def post_events(api, now: float):
    return api.post(EVENTS, {"events": [{"user": "s1", "ts": now, "path": "/pricing"}, {"user": "s2"}]}, format="json")


def assert_503(response, what: str) -> None:
    assert response.status_code == 503, f"{what}: {response.status_code} {response.content[:500]!r}"
    assert "detail" in response.json(), what
    assert int(response["Retry-After"]) > 0, what


def check_replies(state: State, sha: str) -> None:
    """What the real server answers a plain client, then the store's client: EVALSHA and both kinds
    of pipeline, each classified as the state. Inside MULTI redis-py raises a refused command's reply
    behind its note ("Command # 3 (EXPIRE ...) of pipeline caused error: "), which the classifier
    reads past for the codes redis-py has no class for."""
    assert unavailable_reason(state.refused()) == state.code
    client = StandaloneClient.from_url(state.url, **client_options(5.0))
    with pytest.raises(StoreUnavailable) as refused:
        client.evalsha(sha, 1, PROBE, "1")
    assert refused.value.reason in state.codes, repr(refused.value.__cause__)
    for transaction in (False, True):
        pipe = client.pipeline(transaction=transaction)
        pipe.get(PROBE)
        pipe.evalsha(sha, 1, PROBE, "1")
        pipe.expire(PROBE, 60)
        with pytest.raises(StoreUnavailable) as refused:
            pipe.execute()
        cause = refused.value.__cause__
        assert refused.value.reason in state.codes, repr(cause)
        if transaction and state.code in ("BUSY", "NOREPLICAS", "MISCONF"):  # no class for it: the note
            assert cause.status_code is None and str(cause).startswith("Command # "), repr(cause)
    client.close()


def check_refused(state: State, staff_api, browser: Client, seeded_at: float) -> None:
    now = time.time()
    with serving(state.url):
        assert_503(post_events(staff_api, now), "POST events")
        # A late view between the seed's two (within the session window: the state came in time):
        # its script's first write must be the insert Redis refuses, not the take-back of the step it
        # splits, which Redis lets in over maxmemory and then every write after it.
        assert now - seeded_at < 50, "the state took too long to set up for a late view in the window"
        late = {"events": [{"user": "seed", "ts": seeded_at - 6, "path": "/docs"}]}
        assert_503(staff_api.post(EVENTS, late, format="json"), "POST a late view")
        assert_503(staff_api.get(REPORT), "GET most-active report")
        seen = staff_api.get(LAST_SEEN)
        allowed = {503, 404} if state.serves_reads else {503}
        assert seen.status_code in allowed, f"last-seen: {seen.status_code} {seen.content[:500]!r}"

        health = Client().get("/healthz")
        assert health.status_code == 503, health.content
        body = health.json()
        assert body["redis"] != "ok" and body["database"] == "ok", body

        fail_open.reset()
        page = browser.get("/pricing")  # an exception in the middleware would be raised here
        assert page.status_code == 200
        assert fail_open.failures == 1

        # Celery's apply() runs the retries eagerly at once (up to max_retries, then FAILURE), so
        # one attempt is watched with throw=True: the tracer re-raises the Retry that autoretry_for
        # raised while handling the store's error. (Retry.exc is Celery's pickled copy of that
        # error: see test_retry_records_store_unavailable.)
        with pytest.raises(Retry) as retried:
            record_events.apply(args=[[{"user": "s1", "ts": now}]], throw=True)
        cause = retried.value.__context__
        assert isinstance(cause, StoreUnavailable), repr(cause)
        assert cause.reason in state.codes, cause


def check_recovered(state: State, staff_api) -> None:
    fail_open.reset()
    now = time.time()
    with serving(state.url):
        response = post_events(staff_api, now)
        assert response.status_code == 202, response.content
        assert response.json()["accepted"] == 2
        health = Client().get("/healthz")
        assert health.status_code == 200, health.content
        seen = staff_api.get(LAST_SEEN)
        assert seen.status_code == 200, seen.content
        assert seen.json()["ts"] == pytest.approx(now, abs=0.01)


@pytest.mark.parametrize("state_class", STATES, ids=[state.code for state in STATES])
def test_server_state_is_503_fails_open_retries_writes_nothing_and_recovers(
    state_class, fresh_primary, staff_api, member
):
    assert issubclass(StoreUnavailable, tuple(record_events.autoretry_for))
    browser = Client()
    browser.force_login(member)
    state = state_class(fresh_primary)
    try:
        seeded_at = time.time()
        with serving(state.seed_url):
            seed = {"events": [{"user": "seed", "ts": seeded_at - 55, "path": "/home"}]}
            seed["events"].append({"user": "seed", "ts": seeded_at - 5, "path": "/pricing"})
            assert staff_api.post(EVENTS, seed, format="json").status_code == 202
        state.seeded()
        sha = state.raw.script_load(WRITE_SCRIPT)
        before = snapshot(state.raw)
        assert before, "the seed wrote nothing"

        state.enter()
        check_replies(state, sha)
        check_refused(state, staff_api, browser, seeded_at)
        state.leave()

        after = snapshot(state.raw)
        touched = sorted(key for key in before.keys() | after.keys() if before.get(key) != after.get(key))
        assert not touched, f"keys created, changed or deleted in the {state.code} state: {touched}"
        check_recovered(state, staff_api)
    finally:
        fail_open.reset()
        state.close()


# --- the replies no single throwaway server gives ----------------------------------------------

SERVER_STATE_REPLIES = [
    "LOADING Redis is loading the dataset in memory",
    "CLUSTERDOWN The cluster is down",
    "CLUSTERDOWN Hash slot not served",
    "TRYAGAIN Multiple keys request during rehashing of slot",
    "OOM command not allowed when used memory > 'maxmemory'.",
    "READONLY You can't write against a read only replica.",
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    "NOREPLICAS Not enough good replicas to write.",
    "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.",
    "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)",
    "UNBLOCKED client unblocked via CLIENT UNBLOCK",
]
ORDINARY_REPLIES = [
    "WRONGTYPE Operation against a key holding the wrong kind of value",
    "ERR syntax error",
    "ERR value is not an integer or out of range",
    "NOSCRIPT No matching script. Please use EVAL.",
    "ERR Error running script (call to f_0123): @user_script:1: user_script:1: Script attempted to access "
    "nonexistent global variable 'x'",
]
EVALSHA = ("EVALSHA", "7243f4897d235fa32c28708179c8b40dac73788d", "2", "act:{u}:last_seen", "act:{u}:dirty", "1.5")
# A script that answers with the error reply ARGV[1], which the server sends as given: any reply,
# read and parsed by redis-py as a real one is.
ERROR_REPLY = "return redis.error_reply(ARGV[1])"


def parsed(primary: PrivateRedis, reply: str) -> redis.RedisError:
    """``reply`` as redis-py raises it when the server answers with it."""
    raw = plain(primary.url, decode_responses=True)
    error = refusal(lambda: raw.eval(ERROR_REPLY, 0, reply))
    raw.close()
    return error


def annotated(error: redis.RedisError) -> redis.RedisError:
    """``error`` as redis-py raises it from a pipeline ("Command # 1 (...) of pipeline caused error: ...")."""
    redis.Redis().pipeline().annotate_exception(error, 1, EVALSHA)
    return error


def store_errors(primary: PrivateRedis, reply: str) -> list[BaseException]:
    """What the store's client raises when the server answers ``reply``: to a plain call, in a
    pipeline and in a MULTI."""
    client = StandaloneClient.from_url(primary.url, **client_options(5.0))
    errors = []
    for call in (None, False, True):
        pipe = client if call is None else client.pipeline(transaction=call)
        with pytest.raises(Exception) as raised:
            pipe.eval(ERROR_REPLY, 0, reply)
            if call is not None:
                pipe.execute()
        errors.append(raised.value)
    client.close()
    return errors


@pytest.mark.parametrize("reply", SERVER_STATE_REPLIES)
def test_server_state_replies_are_unavailable(reply, primary):
    code = reply.split(" ", 1)[0]
    assert unavailable_reason(parsed(primary, reply)) == code
    error = annotated(parsed(primary, reply))
    assert str(error).startswith("Command # 1 (EVALSHA ")
    assert unavailable_reason(error) == code
    for error in store_errors(primary, reply):
        assert isinstance(error, StoreUnavailable) and error.reason == code, repr(error)


@pytest.mark.parametrize("reply", ORDINARY_REPLIES)
def test_ordinary_errors_are_not_unavailable(reply, primary):
    assert unavailable_reason(parsed(primary, reply)) is None
    assert unavailable_reason(annotated(parsed(primary, reply))) is None
    for error in store_errors(primary, reply):
        assert isinstance(error, redis.ResponseError) and unavailable_reason(error) is None, repr(error)


def test_connection_and_timeout_errors_are_unavailable(primary):
    assert unavailable_reason(redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")) == (
        "connection"
    )
    assert unavailable_reason(redis.TimeoutError("Timeout reading from socket")) == "timeout"
    assert unavailable_reason(parsed(primary, "ERR max number of clients reached")) == "connection"
    assert unavailable_reason(ValueError("not redis")) is None


def test_retry_records_store_unavailable():
    """What Celery records about a retry (``Retry.exc``: the worker's log, the task_retry signal,
    the RETRY state in the result backend) is the error only if it survives pickling; otherwise
    Celery records its nearest pickleable base class. A failure stored by the JSON result backend
    is rebuilt as ``cls(*args)``."""
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"), pytest.raises(Retry) as retried:
        record_events.apply(args=[[{"user": "s1", "ts": time.time()}]], throw=True)
    error = retried.value.__context__
    assert isinstance(error, StoreUnavailable) and error.reason == "connection", repr(error)

    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.reason, str(copy)) == (StoreUnavailable, error.reason, str(error))
    assert isinstance(retried.value.exc, StoreUnavailable), f"Celery records the retry as {retried.value.exc!r}"
    backend = record_events.backend
    rebuilt = backend.exception_to_python(backend.prepare_exception(error, serializer="json"))
    assert (type(rebuilt), str(rebuilt)) == (StoreUnavailable, str(error)), repr(rebuilt)
