"""Scripts are called by SHA and survive SCRIPT FLUSH and a Redis restart, pipelines included; every
key a script touches is declared in its KEYS."""

from __future__ import annotations

import codecs
import re
import secrets
import threading
from collections.abc import Callable, Sequence

import pytest
import redis
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from activity import calendar, clock, conf
from activity.events import Event
from activity.models import Funnel
from activity.services import (
    audience,
    flush,
    funnels,
    groups,
    idempotency,
    ingest,
    last_seen,
    locks,
    privacy,
    recommendations,
    reports,
    sessions,
    signin,
    sweep,
)
from activity.store import keys
from activity.store import last_seen as store
from activity.store import sessions as sessions_store
from activity.store.client import PER_CALL, StandaloneClient, is_cluster
from activity.store.scripts import LUA_DIR, LuaScript
from project.redis_server import PrivateRedis
from tests.last_seen_state import stored
from tests.redis_counts import CommandDelta


def _queue_and_run(client, transaction: bool, scores) -> list:
    """(how many moved, ZCARD of the partition of the first user) from one pipeline."""
    pipe = client.pipeline(transaction=transaction)
    moved = store.queue_update(pipe, scores, now=1.0)
    pipe.zcard(store.partition_of(next(iter(scores))).seen)
    results = pipe.execute()
    return [moved.value, results[-1]]


def _plain_call(client, user: str, ts: float) -> int:
    """One script call outside a pipeline, as ``prune`` makes them: redis-py recovers from NOSCRIPT."""
    part = store.partition_of(user)
    return store.ZADD_UNLESS_SMALLER(client, [part.seen, part.dirty, part.tombstones], ["1", repr(ts), user])


def test_plain_call_after_script_flush(redis_client):
    redis_client.script_flush()
    assert _plain_call(redis_client, "a", 10.0) == 1
    redis_client.script_flush()
    assert _plain_call(redis_client, "a", 11.0) == 1
    assert store.get(redis_client, "a") == 11.0


def test_pipelines_after_script_flush(redis_client):
    for transaction in (False, True):
        redis_client.script_flush()
        assert _queue_and_run(redis_client, transaction, {f"t{transaction}": 5.0})[0] == 1
    # The other commands of the pipeline ran exactly once: one new member per pipeline.
    assert len(stored(redis_client)) == 2


def test_pipeline_costs_no_script_exists_round_trip(redis_client):
    _queue_and_run(redis_client, False, {"warm": 1.0})  # the script is loaded
    with CommandDelta(redis_client) as delta:
        _queue_and_run(redis_client, False, {"b": 2.0})
    assert delta.calls["evalsha"] == 1
    assert delta.calls["zcard"] == 1
    assert not [name for name in delta.calls if name.startswith("script")]


def test_scripts_survive_a_server_restart():
    with PrivateRedis() as server:
        client = StandaloneClient.from_url(server.url, decode_responses=True)
        assert _plain_call(client, "a", 1.0) == 1
        server.restart()  # nothing persisted: data and script cache are gone
        # The re-run script lands after the pipeline's other commands (here ZCARD saw 0).
        assert _queue_and_run(client, True, {"a": 2.0})[0] == 1
        assert store.get(client, "a") == 2.0
        assert _plain_call(client, "a", 3.0) == 1
        client.close()


# --- every key a script touches is declared in its KEYS --------------------------------------------

# Every script the service loads: a prelude (fence.lua, decimal.lua) runs only joined before a
# script that names it (store.scripts).
PRELUDES = {prelude for path in LUA_DIR.glob("*.lua") for prelude in LuaScript(path.stem).preludes}
SCRIPTS = sorted(path.stem for path in LUA_DIR.glob("*.lua") if path.stem not in PRELUDES)
MONITOR_ARGUMENT = re.compile(rb'"((?:[^"\\]|\\.)*)"')


def _monitor_line(line: bytes) -> tuple[bytes, list[bytes]]:
    """(who sent it: ``lua`` for a script's own command, else the client's address; the command's
    arguments) of one MONITOR line, its escapes undone (sdscatrepr's, which Python's own match)."""
    _, rest = line.split(b" ", 1)
    who, command = rest[1:].split(b"] ", 1)
    arguments = MONITOR_ARGUMENT.findall(command)
    return who.split(b" ", 1)[1], [codecs.escape_decode(argument)[0] for argument in arguments]


def script_calls(
    servers: Sequence[redis.Redis], work: Callable[[], None]
) -> list[tuple[str, list[bytes], list[list[bytes]]]]:
    """(script SHA, its KEYS, the commands it ran) for every EVALSHA ``servers`` ran during ``work``,
    as each one's MONITOR reports them: the commands a script runs follow the script's own line."""
    logs: list[list[bytes]] = [[] for _ in servers]
    watching = [threading.Event() for _ in servers]

    def watch(server: redis.Redis, lines: list[bytes], ready: threading.Event) -> None:
        with server.monitor() as monitor:
            ready.set()
            while True:
                line = monitor.connection.read_response()
                if b"monitor-end" in line:
                    return
                lines.append(line)

    watchers = [threading.Thread(target=watch, args=args) for args in zip(servers, logs, watching, strict=True)]
    for watcher, ready in zip(watchers, watching, strict=True):
        watcher.start()
        ready.wait(5)
    try:
        work()
    finally:
        for server, watcher in zip(servers, watchers, strict=True):
            server.echo("monitor-end")
            watcher.join(10)
    calls: list[tuple[str, list[bytes], list[list[bytes]]]] = []
    for lines in logs:
        calls.append(("", [], []))  # another server's log: what follows is not the last one's script
        for who, arguments in map(_monitor_line, lines):
            if who == b"lua":
                calls[-1][2].append(arguments)
            elif arguments and arguments[0].upper() == b"EVALSHA":
                declared = int(arguments[2])
                calls.append((arguments[1].decode(), arguments[3 : 3 + declared], []))
            else:
                calls.append(("", [], []))  # a client's command: what follows is not a script's
    return [call for call in calls if call[0]]


def keys_of(server: redis.Redis, command: list[bytes]) -> set[str]:
    """The keys ``command`` names, as the server reads its arguments (COMMAND GETKEYS)."""
    try:
        found = server.command_getkeys(*command)
    except redis.ResponseError:  # a command without keys
        return set()
    return {key if isinstance(key, str) else key.decode(errors="replace") for key in found}


def primaries(client) -> list[redis.Redis]:
    """A plain connection to each primary (the one server, on a standalone run), for MONITOR."""
    if is_cluster(client):
        return [redis.Redis(host=node.host, port=node.port) for node in client.get_primaries()]
    return [redis.Redis.from_url(conf.get("REDIS_URL"))]


def script_names() -> dict[str, str]:
    """The name of each script of ``lua/`` by the SHA it runs under: one with a prelude's is the SHA
    of the prelude joined with it (``LuaScript.sha``), the one SHA it is ever called by."""
    return {script.sha: script.name for script in map(LuaScript, SCRIPTS)}


def undeclared(server: redis.Redis, calls: list[tuple[str, list[bytes], list[list[bytes]]]]) -> set[tuple[str, str]]:
    """(script, key) for each key a script's commands in ``calls`` named outside its KEYS."""
    names = script_names()
    return {
        (names.get(sha, sha), key)
        for sha, declared, commands in calls
        for command in commands
        for key in keys_of(server, command) - {key.decode(errors="replace") for key in declared}
    }


@pytest.mark.django_db
def test_every_key_a_script_touches_is_declared_in_its_keys(redis_client, monkeypatch):
    """The page-view scripts (every branch: new sessions and transitions, late views inserted across
    midnight with the steps they split taken back, both caps' trims, first views, a rename, the top
    viewers' trim, a tombstoned user, two days), the by-name read and merge,
    the ranked report's read and rebuild, recommendations computed and cached, next-page picks with
    their build, the dashboard's top next pages and an erase, MONITORed on every primary
    (standalone: the one server), so every script of the run: each key a script's commands
    name is among the KEYS of its EVALSHA, so Redis Cluster routes every script by what it touches."""
    monkeypatch.setattr(sessions_store, "MAX_PATHS_PER_DAY", 2)
    monkeypatch.setattr(sessions_store, "MAX_NEXT_PAGES", 2)
    monkeypatch.setattr(sessions_store, "CANDIDATES", 2)
    monkeypatch.setattr(reports, "TOP", 1)
    monkeypatch.setattr(sessions_store, "MAX_TRANSITIONS_PER_DAY", 3)
    monkeypatch.setattr(sessions_store, "TRANSITIONS_PER_DAY_SLACK", 1)
    servers = primaries(redis_client)
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

    calls = script_calls(servers, work)
    ran = {sha for sha, _, _ in calls}
    own = ["session_record", "page_counts", "viewer_record", "report_by_name"]
    own += ["next_cdf", "next_pick", "next_top", "zero_field"]
    assert {LuaScript(name).sha for name in own} <= ran  # each of them ran here
    found = undeclared(servers[0], calls)
    for server in servers:
        server.close()
    assert found == set()
    trims = [command[0].upper() for _, _, commands in calls for command in commands]
    assert b"ZREMRANGEBYRANK" in trims and b"ZMSCORE" in trims  # the caps' trims ran too
    # Late views went in, and the steps they split were looked up to be taken back.
    take_backs = [c for _, _, commands in calls for c in commands if c[0].upper() == b"ZSCORE" and b":next:" in c[1]]
    assert b"LINSERT" in trims and take_backs


@pytest.mark.django_db
def test_every_script_runs_and_touches_only_declared_keys(redis_client, django_capture_on_commit_callbacks):
    """Each script of ``lua/`` runs at least once through the service's own paths (so a script added
    without one here fails), and every key its commands name is among its KEYS: membership and group
    views with their live update, a batch with anonymous visitors, an idempotent one (the fenced
    page-view scripts and the record's two), group actives, a session page, an online page after a
    cursor, a flush under its lock, a prune, the upgrades, the sweep, a rollup, reports,
    recommendations, a funnel's progress and an erase. A MONITOR on every primary of a cluster, so
    every script is seen."""
    users = get_user_model().objects.bulk_create(get_user_model()(username=f"s{n}") for n in range(3))
    ids = [str(user.pk) for user in users]
    group = Group.objects.create(name="scripts")
    Funnel.objects.create(name="scripts", steps=["/p0", "/p1"], window=60, mode="strict")
    now = clock.now()
    day = calendar.day_of(now)
    # What earlier releases left: the sweep merges a legacy first-visit hash and gives a key without
    # a TTL one; the upgrades move last seen out of the one-set layout, fold a view counter, move a
    # day's sessions started from {pv}, fold a day's page counts into the path partitions and move a
    # person's funnel progress into the generations.
    redis_client.hset(keys.visitor_seen(3, 7), secrets.token_bytes(16), calendar.day_number(day))
    redis_client.set(f"{keys.prefix()}no-such-family:1", "1")
    redis_client.zadd(keys.unpartitioned_last_seen(), {"earlier": now - 60})
    redis_client.set(keys.former_user_views(calendar.period_name("day", day), "earlier"), 3, ex=60)
    redis_client.set(f"{keys.prefix()}{keys.PV_TAG}:started:{calendar.day_name(day)}", 2, ex=60)  # before {ses}
    redis_client.set(keys.former_funnel_state(5, "u:earlier"), '{"t":1,"f":{}}', ex=60)
    redis_client.set(keys.former_page_views(calendar.day_name(day)), 3, ex=60)
    redis_client.zadd(keys.former_path_views(calendar.day_name(day)), {"/earlier": 3})

    def work() -> None:
        with django_capture_on_commit_callbacks(execute=True):
            group.user_set.add(*users)
        assert groups.members_page(group.pk, 0, 10) is not None  # the view is built and published
        events = [Event(user, now, f"/p{n}") for n, user in enumerate(ids)]
        ingest.record_events(events, visitors=[(secrets.token_hex(16), now)], names={ids[0]: "s0"})
        ingest.record_events([Event(ids[0], now + 1, "/p1")])  # a transition
        visitor = secrets.token_hex(16)  # a visitor's page views, then a sign-in merging its progress
        # A second on: ``now`` rounded to the millisecond may fall before the funnel's creation.
        ingest.record_events([], visitors=[(visitor, now + 1)], visitor_views=[(visitor, now + 1, "/p0")])
        assert signin.continue_visitor(visitor, ids[1]).funnels == "merged"
        idempotency.once(
            "scripts-test",
            "key",
            {},
            lambda fence: {"n": ingest.record_events([Event(ids[1], now + 2, "/p2")], fence=fence).accepted},
        )
        assert groups.active_members(group.pk, "day") is not None
        assert sessions.page(ids[0]) is not None
        assert last_seen.online_page(limit=1, after=(now + 2, ids[1]))[0]
        with locks.exclusive_job("flush") as held:
            assert held and flush.flush().flushed
        last_seen.prune()
        assert last_seen.upgrade() == 1
        assert sessions.upgrade() == (1, 1, 1)  # merged into this release's counter: the scratch key too
        assert funnels.upgrade() == 1
        assert sweep.sweep().merged == 1
        audience.rollup_day(day)
        reports.page("active-by-name")
        reports.page("most-active")
        recommendations.for_user(ids[0])
        recommendations.next_pages("/p0", 1)
        recommendations.top_next(day, ["/p0"])
        privacy.erase(ids[2])

    servers = primaries(redis_client)
    calls = script_calls(servers, work)
    names = script_names()
    assert sorted({names.get(sha, sha) for sha, _, _ in calls}) == SCRIPTS  # each ran, and nothing else
    found = undeclared(servers[0], calls)
    for server in servers:
        server.close()
    assert found == set()


# Scripts whose KEYS still grow with the call: a key per user in a call (the sessions, the users'
# views hashes and former names). Every other script names at most MAX_KEYS, whatever the batch or
# the window.
KEYS_PER_PERSON = {"session_record", "viewer_record"}
MAX_KEYS = 8


@pytest.mark.django_db
def test_scripts_not_keyed_per_person_name_at_most_eight_keys(redis_client):
    """A batch of 400 users' two page views each (two calls of the per-user scripts) with 400
    visitors and a funnel, then recommendations, next-page picks with their build and the dashboard's
    next pages over the 7-day window: the widest call of each script."""
    Funnel.objects.create(name="keys", steps=["/p0", "/p1"], window=60, mode="strict")
    now = clock.now() + 1  # a second on: ``now`` to the millisecond may fall before the funnel's creation

    def work() -> None:
        users = [f"k{n}" for n in range(2 * PER_CALL)]
        events = [Event(user, now + step / 1000, f"/p{step}") for user in users for step in (0, 1)]
        ingest.record_events(events, visitors=[(secrets.token_hex(16), now) for _ in users])
        recommendations.for_user(users[0])
        recommendations.next_pages("/p0", 2)
        recommendations.top_next(calendar.day_of(now), ["/p0", "/p1"])

    servers = primaries(redis_client)
    calls = script_calls(servers, work)
    for server in servers:
        server.close()
    names, widest = script_names(), {}
    for sha, declared, _ in calls:
        widest[names[sha]] = max(widest.get(names[sha], 0), len(declared))
    assert {"first_visit", "funnel_commit", "next_cdf", "next_pick", "next_top", "pages_now_record"} <= set(widest)
    assert "transitions_count" in widest
    assert {name for name, count in widest.items() if count > MAX_KEYS} == KEYS_PER_PERSON
