"""Scripts are called by SHA and survive SCRIPT FLUSH and a Redis restart, pipelines included; every
key a script touches is declared in its KEYS."""

from __future__ import annotations

import codecs
import re
import threading
from collections.abc import Callable

import pytest
import redis

from activity import calendar, clock, conf
from activity.events import Event
from activity.services import ingest, privacy, recommendations, reports
from activity.store import keys
from activity.store import last_seen as store
from activity.store import sessions as sessions_store
from activity.store.client import StandaloneClient, is_cluster
from activity.store.scripts import LUA_DIR, LuaScript
from project.redis_server import PrivateRedis
from tests.redis_counts import CommandDelta


def _queue_and_run(client, transaction: bool, scores) -> list:
    pipe = client.pipeline(transaction=transaction)
    moved_at = store.queue_update(pipe, scores, now=1.0)
    pipe.zcard(keys.last_seen())
    results = pipe.execute()
    return [sum(results[at] for at in moved_at), results[-1]]


def test_plain_call_after_script_flush(redis_client):
    redis_client.script_flush()
    assert store.update(redis_client, {"a": 10.0}, now=1.0) == 1
    redis_client.script_flush()
    assert store.update(redis_client, {"a": 11.0}, now=1.0) == 1
    assert store.get(redis_client, "a") == 11.0


def test_pipelines_after_script_flush(redis_client):
    for transaction in (False, True):
        redis_client.script_flush()
        assert _queue_and_run(redis_client, transaction, {f"t{transaction}": 5.0})[0] == 1
    # The other commands of the pipeline ran exactly once: one new member per pipeline.
    assert redis_client.zcard(keys.last_seen()) == 2


def test_pipeline_costs_no_script_exists_round_trip(redis_client):
    store.update(redis_client, {"warm": 1.0}, now=1.0)  # the script is loaded
    with CommandDelta(redis_client) as delta:
        _queue_and_run(redis_client, False, {"b": 2.0})
    assert delta.calls["evalsha"] == 1
    assert delta.calls["zcard"] == 1
    assert not [name for name in delta.calls if name.startswith("script")]


def test_scripts_survive_a_server_restart():
    with PrivateRedis() as server:
        client = StandaloneClient.from_url(server.url, decode_responses=True)
        assert store.update(client, {"a": 1.0}, now=1.0) == 1
        server.restart()  # nothing persisted: data and script cache are gone
        # The re-run script lands after the pipeline's other commands (here ZCARD saw 0).
        assert _queue_and_run(client, True, {"a": 2.0})[0] == 1
        assert store.get(client, "a") == 2.0
        assert store.update(client, {"a": 3.0}, now=1.0) == 1
        client.close()


# --- every key a script touches is declared in its KEYS --------------------------------------------

MONITOR_ARGUMENT = re.compile(rb'"((?:[^"\\]|\\.)*)"')


def _monitor_line(line: bytes) -> tuple[bytes, list[bytes]]:
    """(who sent it: ``lua`` for a script's own command, else the client's address; the command's
    arguments) of one MONITOR line, its escapes undone (sdscatrepr's, which Python's own match)."""
    _, rest = line.split(b" ", 1)
    who, command = rest[1:].split(b"] ", 1)
    arguments = MONITOR_ARGUMENT.findall(command)
    return who.split(b" ", 1)[1], [codecs.escape_decode(argument)[0] for argument in arguments]


def script_calls(server: redis.Redis, work: Callable[[], None]) -> list[tuple[str, list[bytes], list[list[bytes]]]]:
    """(script SHA, its KEYS, the commands it ran) for every EVALSHA ``server`` ran during ``work``,
    as MONITOR reports them: the commands a script runs follow the script's own line."""
    lines: list[bytes] = []
    ready = threading.Event()

    def watch() -> None:
        with server.monitor() as monitor:
            ready.set()
            while True:
                line = monitor.connection.read_response()
                if b"monitor-end" in line:
                    return
                lines.append(line)

    watcher = threading.Thread(target=watch)
    watcher.start()
    ready.wait(5)
    try:
        work()
    finally:
        server.echo("monitor-end")
        watcher.join(10)
    calls: list[tuple[str, list[bytes], list[list[bytes]]]] = []
    for who, arguments in map(_monitor_line, lines):
        if who == b"lua" and calls:
            calls[-1][2].append(arguments)
        elif arguments and arguments[0].upper() == b"EVALSHA":
            declared = int(arguments[2])
            calls.append((arguments[1].decode(), arguments[3 : 3 + declared], []))
        elif calls:
            calls.append(("", [], []))  # a client's command: what follows is not a script's
    return [call for call in calls if call[0]]


def keys_of(server: redis.Redis, command: list[bytes]) -> set[str]:
    """The keys ``command`` names, as the server reads its arguments (COMMAND GETKEYS)."""
    try:
        found = server.command_getkeys(*command)
    except redis.ResponseError:  # a command without keys
        return set()
    return {key if isinstance(key, str) else key.decode(errors="replace") for key in found}


@pytest.mark.django_db
def test_every_key_a_script_touches_is_declared_in_its_keys(redis_client, monkeypatch):
    """The page-view scripts (every branch: new sessions and transitions, late views inserted across
    midnight with the steps they split taken back, both caps' trims, first views, a rename, the top
    viewers' trim, a tombstoned user, two days), the by-name read and merge,
    the ranked report's read and rebuild, recommendations computed and cached, next-page picks with
    their build, the dashboard's top next pages and an erase, MONITORed on the server of the {pv}
    slot (standalone: the one server, so every script of the run): each key a script's commands
    name is among the KEYS of its EVALSHA, so Redis Cluster routes every script by what it touches."""
    monkeypatch.setattr(sessions_store, "MAX_PATHS_PER_DAY", 2)
    monkeypatch.setattr(sessions_store, "MAX_NEXT_PAGES", 2)
    monkeypatch.setattr(sessions_store, "CANDIDATES", 2)
    monkeypatch.setattr(reports, "TOP", 1)
    monkeypatch.setattr(sessions_store, "MAX_TRANSITIONS_PER_DAY", 3)
    monkeypatch.setattr(sessions_store, "TRANSITIONS_PER_DAY_SLACK", 1)
    if is_cluster(redis_client):
        node = redis_client.get_node_from_key(keys.session("x"))
        server = redis.Redis(host=node.host, port=node.port)
    else:
        server = redis.Redis.from_url(conf.get("REDIS_URL"))
    # 30 s after midnight: the session script declares yesterday's keys and today's.
    midnight = calendar.midnight(calendar.day_of(clock.now())).timestamp()
    now = midnight + 30
    monkeypatch.setattr(clock, "now", lambda: now)
    privacy.erase("gone")  # tombstoned: the page-view scripts look it up and skip its views

    def work() -> None:
        for n in range(3):
            events = [Event(f"u{i}", now - 86400 * (n == 0) + i, f"/p{(i + n) % 5}") for i in range(6)]
            events += [Event("gone", now, "/p1"), Event("u0", now, "/p9"), Event("u0", now + 1, f"/q{n}")]
            events.append(Event("u0", midnight - 10 + n, f"/late{n}"))  # yesterday, late: u0 has today's views
            ingest.record_events(events, names={"u1": f"name-{n}"})
        reports.page("active-by-name")
        reports.page("most-active")
        reports.rebuild("most-active")
        recommendations.for_user("u0")
        recommendations.for_user("u0")
        recommendations.next_pages("/p9", 2)
        recommendations.top_next(calendar.day_of(now), ["/p1", "/p9"])
        privacy.erase("u2")

    calls = script_calls(server, work)
    ran = {sha for sha, _, _ in calls}
    own = ["session_record", "page_counts", "viewer_names", "viewer_rank", "report_by_name", "recommend"]
    own += ["next_cdf", "next_pick", "next_top", "erase"]
    assert {LuaScript(name).sha for name in own} <= ran  # each of them ran here
    names = {LuaScript(path.stem).sha: path.stem for path in LUA_DIR.glob("*.lua")}
    undeclared = {
        (names.get(sha, sha), key)
        for sha, declared, commands in calls
        for command in commands
        for key in keys_of(server, command) - {key.decode(errors="replace") for key in declared}
    }
    server.close()
    assert undeclared == set()
    trims = [command[0].upper() for _, _, commands in calls for command in commands]
    assert b"ZREMRANGEBYRANK" in trims and b"ZMSCORE" in trims  # the caps' trims ran too
    # Late views went in, and the steps they split were looked up to be taken back.
    take_backs = [c for _, _, commands in calls for c in commands if c[0].upper() == b"ZSCORE" and b":next:" in c[1]]
    assert b"LINSERT" in trims and take_backs
