"""Navigation sessions: window, cap under concurrency, TTLs, exact counters, paging, one round trip."""

from __future__ import annotations

import math
import random
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.http import HttpResponse, JsonResponse
from django.test import override_settings
from django.urls import path

from activity import calendar, clock, conf
from activity.events import Event
from activity.services import ingest, sessions
from activity.store import keys, partitioning
from activity.store import sessions as sessions_store
from activity.store.scripts import LuaScript
from activity.store.sessions import (
    PAGE_COUNTS,
    SESSION_RECORD,
    TRANSITIONS_COUNT,
    VIEWER_RECORD,
    path_tag,
    paths_slack,
)
from activity.tasks import record_events as record_events_task
from activity.web import middleware
from tests.clients import Client
from tests.conftest import delete_own_keys
from tests.redis_counts import CommandDelta
from tests.redis_probe import probe
from tests.test_scripts import primaries, script_calls


def html_page(request):
    return HttpResponse("<p>page</p>")


def json_page(request):
    return JsonResponse({"ok": True})


urlpatterns = [
    path("pricing", html_page),
    path("docs/<str:name>", html_page),
    path("private/area", html_page),
    path("data.json", json_page),
]


def today():
    return datetime.fromtimestamp(clock.now(), UTC).date()


def view(user: str, page: str, ts: float | None = None) -> Event:
    return Event(user=user, ts=clock.now() if ts is None else ts, path=page)


def stored(redis_client, user: str) -> list[dict]:
    rows = redis_client.lrange(keys.session(user), 0, -1)
    return [dict(zip(("path", "ts"), sessions_store.entry_view(row), strict=True)) for row in rows]


def page_view_keys(redis_client) -> set[str]:
    """Every key of the page-view tags, the sessions' and the viewers'."""
    return {
        key
        for tag in (keys.SESSIONS_TAG, keys.PV_TAG)
        for key in redis_client.scan_iter(match=f"{conf.settings.KEY_PREFIX}{tag}*", count=1000)
    }


def assert_every_key_has_a_ttl(redis_client) -> None:
    for key in page_view_keys(redis_client):
        assert redis_client.ttl(key) > 0, key


# --- the window --------------------------------------------------------------------------------


@override_settings(ACTIVITY_SESSION_WINDOW=1)
def test_views_within_the_window_stay_in_one_session_and_a_longer_pause_starts_a_new_one(redis_client):
    started = [ingest.record_events([view("u1", "/a")]).sessions_started]
    time.sleep(0.5)
    started.append(ingest.record_events([view("u1", "/b")]).sessions_started)
    time.sleep(0.5)
    started.append(ingest.record_events([view("u1", "/c")]).sessions_started)
    assert started == [1, 0, 0]
    assert [e["path"] for e in stored(redis_client, "u1")] == ["/a", "/b", "/c"]
    assert 0 < redis_client.pttl(keys.session("u1")) <= 1000

    time.sleep(1.5)
    assert sessions.page("u1") is None
    assert ingest.record_events([view("u1", "/d")]).sessions_started == 1
    assert [e["path"] for e in stored(redis_client, "u1")] == ["/d"]
    assert sessions.started(today()) == 2
    assert sessions.page_views(today()) == 4


# --- the cap and TTLs under concurrency ----------------------------------------------------------


@override_settings(ACTIVITY_SESSION_MAX_PAGES=10)
def test_cap_holds_under_concurrency_and_the_list_never_lacks_a_ttl(redis_client):
    threads_n, views_n = 20, 15
    barrier = threading.Barrier(threads_n + 1)
    stop = threading.Event()
    ttls: list[int] = []

    def push(t: int) -> None:
        barrier.wait()
        for i in range(views_n):
            ingest.record_events([view("hot", f"/t{t}/{i:02d}")])

    def watch() -> None:
        barrier.wait()
        while not stop.is_set():
            ttls.append(redis_client.pttl(keys.session("hot")))

    workers = [threading.Thread(target=push, args=(t,)) for t in range(threads_n)]
    watcher = threading.Thread(target=watch)
    for thread in [*workers, watcher]:
        thread.start()
    for thread in workers:
        thread.join()
    stop.set()
    watcher.join()

    entries = stored(redis_client, "hot")
    assert len(entries) == 10
    # The newest 10 in arrival order: each thread's kept pages are the tail of what it sent, in order.
    by_thread: dict[str, list[int]] = {}
    for entry in entries:
        _, thread_name, seq = entry["path"].split("/")
        by_thread.setdefault(thread_name, []).append(int(seq))
    for seqs in by_thread.values():
        assert seqs == list(range(views_n - len(seqs), views_n))
    assert -1 not in ttls  # the list existed without a TTL at no moment the watcher saw
    assert 0 < redis_client.pttl(keys.session("hot")) <= conf.settings.SESSION_WINDOW * 1000
    assert sessions.page_views(today()) == threads_n * views_n
    assert sessions.started(today()) == 1
    assert_every_key_has_a_ttl(redis_client)


def test_counters_match_a_concurrent_burst_exactly(redis_client):
    ingest.record_events([view("old0", "/warm"), view("old1", "/warm")])  # two live sessions already
    users = [f"old{i}" for i in range(2)] + [f"new{i}" for i in range(6)]
    pages = ["/", "/pricing", "/docs/a", "/docs/b"]
    threads_n, batches = 8, 10
    barrier = threading.Barrier(threads_n)
    started = Counter()

    def burst(t: int) -> None:
        barrier.wait()
        for b in range(batches):
            batch = [view(users[(t + b + i) % len(users)], pages[(t * b + i) % len(pages)]) for i in range(5)]
            started[t] += ingest.record_events(batch).sessions_started

    workers = [threading.Thread(target=burst, args=(t,)) for t in range(threads_n)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()

    sent = Counter()
    for t in range(threads_n):
        for b in range(batches):
            for i in range(5):
                sent[pages[(t * b + i) % len(pages)]] += 1
    sent["/warm"] += 2
    assert sum(started.values()) == 6  # only the six users without a live session started one
    assert sessions.started(today()) == 8
    assert sessions.page_views(today()) == sum(sent.values())
    assert dict(sessions.top_paths(today(), 10)) == dict(sent)
    assert sessions.top_paths(today(), 2) == sorted(sent.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)[:2]
    assert_every_key_has_a_ttl(redis_client)


# A counts test, not a latency one: a generous socket timeout so a loaded shared machine does not
# turn a slow 1,000-view script call into a StoreTimeout. Transitions are off: their cap trims with
# the same command (tests/test_recommendations.py counts those).
@override_settings(ACTIVITY_REDIS_TIMEOUT=10.0, ACTIVITY_TRANSITIONS=False)
def test_distinct_paths_per_day_stay_capped_and_the_most_viewed_survive(redis_client, monkeypatch):
    monkeypatch.setattr(sessions, "KEEP_QUERY", True)
    partitions = sessions_store.PATH_PARTITIONS
    cap = sessions_store.MAX_PATHS_PER_DAY // partitions  # each partition of the paths keeps its share
    slack = paths_slack(cap)
    popular = {f"/popular/{n}": n % 5 + 1 for n in range(50)}  # views per batch, from the first batch
    distinct = (f"/search?q={n}" for n in range(100_000))  # a catch-all route with kept query strings
    sizes = []
    with CommandDelta(redis_client) as delta:
        for batch in range(100):
            pages = [next(distinct) for _ in range(1000)]
            pages += [path for path, weight in popular.items() for _ in range(weight)]
            pages += ["/late-hit"] * 20 * (batch >= 90)  # popular only in the last ten batches
            ingest.record_events([view(f"u{i % 20}", page) for i, page in enumerate(pages)])
            day = calendar.day_name(today())
            sizes.append([redis_client.zcard(keys.path_views(n, day)) for n in range(partitions)])
    assert max(map(max, sizes)) <= cap + slack
    assert min(sizes[-1]) >= cap
    assert max(map(sum, sizes)) <= sessions_store.MAX_PATHS_PER_DAY + partitions * slack
    # Each trim removes at most slack + 1 paths, once per slack + 1 new ones: bounded per call.
    assert delta.calls["zremrangebyrank"] <= 100_000 // (slack + 1)
    expected = {path: 100 * weight for path, weight in popular.items()} | {"/late-hit": 200}
    assert dict(sessions.top_paths(today(), 51)) == expected
    assert sessions.page_views(today()) == 100_000 + sum(expected.values())
    assert_every_key_has_a_ttl(redis_client)


def bad_calls() -> list[tuple[LuaScript, list[str], list, str]]:
    """Each page-view script with one view whose arguments lack one (or whose keys lack one)."""
    day, week = calendar.period_name("day", today()), calendar.period_name("week", today())
    name = calendar.day_name(today())
    tombstones, user = keys.tombstones("pv"), "x"
    unfenced = ["", "1"]  # lua/fence.lua's arguments, with the tombstones' key for its own
    viewers = [tombstones, keys.top_viewers(day), keys.top_viewers(week), keys.viewers_by_name(day)]
    viewers += [keys.viewers_by_name(week), keys.viewers_by_name_pending(day), keys.viewers_by_name_pending(week)]
    viewers.append(keys.viewer(user))
    calls = [
        (
            SESSION_RECORD,
            [keys.tombstones("ses"), keys.sessions_started(name), keys.transition_steps(name), keys.session(user)],
            [1, 60000, 50, 10, 1, 1.0, 0, 86400, user],  # no entry
            "a key and 2 arguments per view",
        ),
        (
            PAGE_COUNTS,
            [keys.tombstones(path_tag(0)), keys.page_views(0, name), keys.path_views(0, name)],
            [10, 100, 10, 1.0, user],
            "2 arguments per view",
        ),
        (
            VIEWER_RECORD,
            viewers[:-1],  # without the user's views hash
            [day, week, day, week, 10, 10, 10, 1000, 1.0, user, 1, ""],
            "a key and 3 arguments per user",
        ),
        (
            VIEWER_RECORD,
            viewers,
            [day, week, day, week, 10, 10, 10, 1000, 1.0, user, 0, ""],
            "each user views must be an integer >= 1",
        ),
    ]
    fenced = [
        (script, [script_keys[0], *script_keys], [*unfenced, *args], message)
        for script, script_keys, args, message in calls
    ]
    steps = [keys.transition_steps(name), keys.transitions(name), keys.transitions_index(name)]
    return [
        *fenced,
        (TRANSITIONS_COUNT, steps, [10, 50, 5, 50000, 5000], "expected 4 keys and 6 arguments"),
    ]


@pytest.mark.parametrize(
    "call",
    range(5),
    ids=["session_record", "page_counts", "viewer_record", "viewer_record_views", "transitions_count"],
)
def test_each_page_view_script_checks_its_argument_counts_and_writes_nothing_when_they_are_wrong(redis_client, call):
    script, script_keys, args, message = bad_calls()[call]
    pipe = redis_client.pipeline(transaction=False)
    pipe.script(script, script_keys, args)
    with pytest.raises(redis.ResponseError, match=message):
        pipe.execute()
    assert redis_client.exists(*script_keys) == 0


# --- what gets recorded ---------------------------------------------------------------------------


def test_query_strings_are_dropped_and_excluded_prefixes_never_recorded(redis_client, monkeypatch):
    monkeypatch.setattr(sessions, "EXCLUDE_PATHS", ("/private/",))
    ingest.record_events([view("u", "/a?token=secret"), view("u", "/private/x"), view("u", "/b")])
    assert [e["path"] for e in stored(redis_client, "u")] == ["/a", "/b"]
    assert sessions.page_views(today()) == 2
    monkeypatch.setattr(sessions, "KEEP_QUERY", True)
    ingest.record_events([view("u", "/c?q=1")])
    assert stored(redis_client, "u")[-1]["path"] == "/c?q=1"


def test_ingest_api_and_task_record_page_views_only_for_events_with_a_path(staff_api, redis_client):
    now = clock.now()
    body = {"events": [{"user": "7", "ts": now, "path": "/pricing"}, {"user": "7", "ts": now}]}
    assert staff_api.post("/api/v1/events/", body, format="json").status_code == 202
    record_events_task([{"user": "7", "ts": now + 0.5, "path": "/docs/a"}])
    assert [(e["path"], e["ts"]) for e in stored(redis_client, "7")] == [
        ("/pricing", round(now, 3)),
        ("/docs/a", round(now + 0.5, 3)),
    ]
    assert redis_client.hget(keys.viewer("7"), keys.VIEWER_NAME) == "7"  # no username known: the id stands in


# --- one batch: two days, repeated first views, a rename --------------------------------------------

WEDNESDAY = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()  # ISO week 2026W48 began on Monday 23rd
TUESDAY_NIGHT = WEDNESDAY - 12 * 3600 - 0.5  # 23:59:59.5 UTC, the same ISO week


def counter(redis_client, period: str, when: float, user: str) -> int:
    """The user's views in the ``period`` (day or week) holding ``when``."""
    return int(redis_client.hget(keys.viewer(user), calendar.period_name(period, calendar.day_of(when))) or 0)


def pending(redis_client, period: str, when: float) -> set[str]:
    return redis_client.smembers(keys.viewers_by_name_pending(calendar.period_name(period, calendar.day_of(when))))


def test_a_batch_across_midnight_records_each_view_on_its_own_day_in_one_round_trip(redis_client, monkeypatch):
    from tests.test_recommendations import counted

    monday = WEDNESDAY - 2 * 86400
    monkeypatch.setattr(clock, "now", lambda: monday)
    ingest.record_events([view("warm", "/w", monday)])  # Monday: scripts loaded
    # Wednesday 00:00:29.5: every view of the batch is within the session window.
    monkeypatch.setattr(clock, "now", lambda: TUESDAY_NIGHT + 30)
    tuesday, wednesday = calendar.day_of(TUESDAY_NIGHT), calendar.day_of(WEDNESDAY)
    batch = [
        view("u1", "/a", TUESDAY_NIGHT),
        view("u2", "/c", TUESDAY_NIGHT + 1),  # Wednesday 00:00:00.5
        view("u1", "/b", TUESDAY_NIGHT + 1),
        view("u2", "/a", TUESDAY_NIGHT + 2),
    ]
    with probe(redis_client) as sent:
        assert ingest.record_events(batch).sessions_started == 2  # u1's on Tuesday, u2's on Wednesday
    # One send. Two days of people (dense ids and first days, two calls a day) make the pipeline
    # over 6,000 bytes, which redis-py writes as two buffers back to back: the server may read
    # them in two events, still within the one round trip.
    assert sent.client_sends == 1 and sent.server_reads <= 2
    assert [e["path"] for e in stored(redis_client, "u1")] == ["/a", "/b"]
    assert [e["path"] for e in stored(redis_client, "u2")] == ["/c", "/a"]
    assert (sessions.started(tuesday), sessions.started(wednesday)) == (1, 1)
    assert (sessions.page_views(tuesday), sessions.page_views(wednesday)) == (1, 3)
    assert sessions.top_paths(tuesday) == [("/a", 1)]
    assert dict(sessions.top_paths(wednesday)) == {"/a": 1, "/b": 1, "/c": 1}
    # u1's step across midnight is counted on the day of the view it led to.
    assert counted("/a", calendar.day_name(tuesday)) == {}
    assert counted("/a", calendar.day_name(wednesday)) == {"/b": 1}
    assert counted("/c", calendar.day_name(wednesday)) == {"/a": 1}
    assert [counter(redis_client, "day", TUESDAY_NIGHT, user) for user in ("u1", "u2")] == [1, 0]
    assert [counter(redis_client, "day", WEDNESDAY, user) for user in ("u1", "u2")] == [1, 2]
    assert [counter(redis_client, "week", WEDNESDAY, user) for user in ("u1", "u2")] == [2, 2]
    top_tuesday = redis_client.zrange(keys.top_viewers(calendar.period_name("day", tuesday)), 0, -1, withscores=True)
    top_wednesday = redis_client.zrange(
        keys.top_viewers(calendar.period_name("day", wednesday)), 0, -1, withscores=True
    )
    assert (top_tuesday, top_wednesday) == ([("u1", 1.0)], [("u1", 1.0), ("u2", 2.0)])
    assert pending(redis_client, "day", TUESDAY_NIGHT) == {"u1\x00u1", ""}
    assert pending(redis_client, "day", WEDNESDAY) == {"u1\x00u1", "u2\x00u2", ""}
    assert pending(redis_client, "week", WEDNESDAY) == {"warm\x00warm", "u1\x00u1", "u2\x00u2", ""}
    assert_every_key_has_a_ttl(redis_client)


def pv_state(redis_client) -> dict[str, object]:
    """What each page-view key holds (not its TTL)."""
    read = {
        "list": lambda key: redis_client.lrange(key, 0, -1),
        "zset": lambda key: redis_client.zrange(key, 0, -1, withscores=True),
        "hash": redis_client.hgetall,
        "set": redis_client.smembers,
        "string": redis_client.get,
    }
    return {key: read[redis_client.type(key)](key) for key in page_view_keys(redis_client)}


def test_a_batch_goes_in_calls_of_bounded_keys_and_writes_what_one_call_would(redis_client, monkeypatch):
    """A session call takes at most PER_CALL views and a viewers call PER_CALL users, so their keys
    stay bounded; split so, a batch writes exactly what one call per script would."""
    now = calendar.midnight(calendar.day_of(clock.now())).timestamp() + 12 * 3600
    monkeypatch.setattr(clock, "now", lambda: now)
    rng = random.Random(7)
    batch = [view(f"u{rng.randrange(40)}", f"/p/{rng.randrange(6)}", now - rng.uniform(0, 50)) for _ in range(90)]
    batch += [view(f"u{n}", "/old", now - 7200) for n in range(10)]  # past the window: statistics only
    names = {f"u{n}": f"name-{n}" for n in range(0, 40, 3)}
    monkeypatch.setattr(sessions_store, "PER_CALL", 1000)
    ingest.record_events(batch, names=names)
    whole = pv_state(redis_client)
    delete_own_keys(redis_client)

    monkeypatch.setattr(sessions_store, "PER_CALL", 8)
    servers = primaries(redis_client)
    calls = script_calls(servers, lambda: ingest.record_events(batch, names=names))
    for server in servers:
        server.close()
    sizes = {
        script: [len(declared) for sha, declared, _ in calls if sha == script.sha]
        for script in (SESSION_RECORD, VIEWER_RECORD)
    }
    # Past the fence's record and the tombstones: 2 keys per declared day, or the 6 period keys.
    assert len(sizes[SESSION_RECORD]) == math.ceil(90 / 8) and max(sizes[SESSION_RECORD]) <= 2 + 2 * 2 + 8
    assert len(sizes[VIEWER_RECORD]) == math.ceil(len({event.user for event in batch}) / 8)
    assert max(sizes[VIEWER_RECORD]) == 2 + 6 + 8  # a views hash per user
    assert pv_state(redis_client) == whole


def test_several_first_views_of_a_user_in_one_batch_pend_one_entry_and_later_views_none(redis_client):
    from activity.services import reports

    ingest.record_events([view("n1", "/a"), view("n1", "/b"), view("n1", "/c")], names={"n1": "Nina"})
    now = clock.now()
    for period in ("day", "week"):
        assert pending(redis_client, period, now) == {"Nina\x00n1", ""}
        assert redis_client.ttl(keys.viewers_by_name_pending(calendar.period_name(period, today()))) > 0
        assert counter(redis_client, period, now, "n1") == 3
    reports.refresh()  # the entries merged into the indexes: the pending sets are gone
    with CommandDelta(redis_client) as delta:
        ingest.record_events([view("n1", "/d")], names={"n1": "Nina"})
    assert delta.calls["sadd"] == 0  # not a first view: nothing pended
    assert pending(redis_client, "day", now) == pending(redis_client, "week", now) == set()


def test_a_new_user_renamed_within_a_batch_keeps_one_entry_under_the_last_name(redis_client):
    from activity.services import reports
    from activity.store.sessions import PageView, queue_record

    now = clock.now()
    pipe = redis_client.pipeline(transaction=False)
    queue_record(pipe, [PageView("n2", "/a", now, "zed"), PageView("n2", "/b", now, "amy")], 60, 50, 8, now)
    pipe.execute()
    for period in ("day", "week"):
        assert pending(redis_client, period, now) == {"amy\x00n2", ""}
        assert counter(redis_client, period, now, "n2") == 2
    # The batch's last name is the one stored: "zed" names no entry, so no former name keeps it.
    assert [field for field in redis_client.hkeys(keys.viewer("n2")) if field.startswith(keys.VIEWER_FORMER)] == []
    found, _ = reports.page("active-by-name")
    assert [(row["user"], row["name"], row["views"]) for row in found.rows] == [("n2", "amy", 2)]


# --- one hash per viewer ------------------------------------------------------------------------------


def test_a_viewers_hash_keeps_only_the_periods_the_statistics_keep(redis_client, at):
    """A user coming back every few days keeps one key: each day's first view drops the fields of
    days and weeks past ``ACTIVITY_PAGE_STATS_DAYS``, and the hash lives a week's TTL after the
    latest view."""
    stats = conf.settings.PAGE_STATS_DAYS
    start = WEDNESDAY - 30 * 86400
    for day in range(0, 30, 3):
        at(start + day * 86400)
        ingest.record_events([view("r", "/a", start + day * 86400)], names={"r": "Rita"})
    fields = redis_client.hgetall(keys.viewer("r"))
    today_ = calendar.day_of(start + 27 * 86400)
    kept_days = {calendar.period_name("day", calendar.day_of(start + day * 86400)) for day in range(0, 30, 3)}
    kept_days = {name for name in kept_days if name >= calendar.period_name("day", today_ - timedelta(days=stats))}
    kept_weeks = {calendar.period_name("week", calendar.day_of(start + day * 86400)) for day in range(0, 30, 3)}
    oldest_week = calendar.period_name("week", today_ - timedelta(days=stats + 7))
    kept_weeks = {name for name in kept_weeks if name >= oldest_week}
    assert set(fields) == {keys.VIEWER_NAME} | kept_days | kept_weeks
    assert all(fields[name] == "1" for name in kept_days) and fields[keys.VIEWER_NAME] == "Rita"
    assert len(kept_days) == 3 and 2 <= len(kept_weeks) <= 3
    hash_ttl = (stats + 7) * 86400 + 25 * 3600  # renewed at a first view of the day, a day's slack
    assert hash_ttl - 5 <= redis_client.ttl(keys.viewer("r")) <= hash_ttl


def test_the_upgrade_folds_an_earlier_releases_names_and_counters_into_the_hashes(redis_client, capsys):
    """Counts of the earlier keys add to what this release counted meanwhile; a name this release
    set stays; each earlier key is gone; a second run folds nothing."""
    from django.core.management import call_command

    now = clock.now()
    day, week = calendar.period_name("day", calendar.day_of(now)), calendar.period_name("week", calendar.day_of(now))
    redis_client.set(keys.former_display_name("a:1"), "Ann", ex=3600)
    redis_client.set(keys.former_user_views(day, "a:1"), 4, ex=3600)
    redis_client.set(keys.former_user_views(week, "a:1"), 9, ex=7200)
    redis_client.set(keys.former_display_name("b"), "old-b", ex=3600)
    ingest.record_events([view("b", "/x")], names={"b": "Bea"})  # this release's view, before the upgrade
    redis_client.set(keys.former_user_views(day, "b"), 2, ex=3600)
    call_command("activity_upgrade")
    assert "folded 5 display names and view counters" in capsys.readouterr().out
    assert redis_client.hgetall(keys.viewer("a:1")) == {keys.VIEWER_NAME: "Ann", day: "4", week: "9"}
    assert 7100 <= redis_client.ttl(keys.viewer("a:1")) <= 7200
    assert redis_client.hgetall(keys.viewer("b")) == {keys.VIEWER_NAME: "Bea", day: "3", week: "1"}
    assert not redis_client.exists(keys.former_display_name("a:1"), keys.former_display_name("b"))
    assert not redis_client.exists(keys.former_user_views(day, "a:1"), keys.former_user_views(day, "b"))
    call_command("activity_upgrade")
    assert "folded 0 display names" in capsys.readouterr().out


def test_the_upgrade_moves_an_earlier_releases_sessions_and_transitions_into_their_tag(redis_client, capsys, at):
    """What a release before {ses} kept under {pv}: restored as it was where this release holds
    nothing yet; merged where it began keys meanwhile (counters add up, a sign-in keeps its later
    time, this release's session stays), with the longer TTL. A former key met again after its move
    (a run stopped before deleting it) is deleted, not merged twice."""
    from django.core.management import call_command

    now = WEDNESDAY + 12 * 3600
    at(now)
    day = calendar.day_name(calendar.day_of(now))

    def former(key: str) -> str:
        return key.replace(keys.SESSIONS_TAG, keys.PV_TAG, 1)

    ingest.record_events([view("b", "/x", now), view("b", "/y", now + 1)])  # this release's: a session, a step
    redis_client.zadd(keys.linked_visitors("b"), {"v1": now - 10})
    redis_client.expire(keys.linked_visitors("b"), 100)
    earlier = {
        keys.session("a"): lambda key: redis_client.rpush(key, '{"path":"/a","ts":1.0}'),
        keys.session("b"): lambda key: redis_client.rpush(key, '{"path":"/old","ts":1.0}'),
        keys.linked_visitors("b"): lambda key: redis_client.zadd(key, {"v1": now - 20, "v2": now - 30}),
        keys.sessions_started(day): lambda key: redis_client.set(key, 5),
        keys.transitions(day): lambda key: redis_client.zadd(key, {"/x\0/y": 2, "/a\0/b": 1}),
    }
    for key, write in earlier.items():
        write(former(key))
        redis_client.expire(former(key), 5000)
    started_ttl = redis_client.ttl(keys.sessions_started(day))
    call_command("activity_upgrade", "--step", "2")
    assert "moved 5 session keys from {pv} into {ses}" in capsys.readouterr().out
    assert [entry["path"] for entry in stored(redis_client, "a")] == ["/a"]
    assert [entry["path"] for entry in stored(redis_client, "b")] == ["/x", "/y"]
    assert redis_client.zrange(keys.linked_visitors("b"), 0, -1, withscores=True) == [
        ("v2", now - 30),
        ("v1", now - 10),
    ]
    assert sessions.started(calendar.day_of(now)) == 1 + 5
    assert redis_client.zscore(keys.transitions(day), "/x\0/y") == 1 + 2
    assert redis_client.zscore(keys.transitions(day), "/a\0/b") == 1
    assert 4990 <= redis_client.ttl(keys.linked_visitors("b")) <= 5000  # the longer TTL, the former's
    assert redis_client.ttl(keys.sessions_started(day)) >= started_ttl - 5  # its own, the longer
    assert 4990 <= redis_client.ttl(keys.session("a")) <= 5000
    assert not redis_client.exists(*map(former, earlier))
    redis_client.set(former(keys.sessions_started(day)), 5, ex=5000)  # as if the delete had not run
    call_command("activity_upgrade")
    assert "moved 0 session keys" in capsys.readouterr().out
    assert sessions.started(calendar.day_of(now)) == 6 and not redis_client.exists(former(keys.sessions_started(day)))
    assert_every_key_has_a_ttl(redis_client)


def test_the_upgrade_folds_an_earlier_releases_page_counts_into_the_path_partitions_once(redis_client, capsys, at):
    """A day of page counts a release before the path partitions kept under {pv}: its paths go to
    their partitions, added to what this release counted meanwhile, its total to the day's page
    views, with the former keys' TTL where a key is made. Met again after its fold (a run stopped
    before deleting it), the day is deleted, not counted twice."""
    from django.core.management import call_command

    now = WEDNESDAY + 12 * 3600
    at(now)
    day = calendar.day_name(calendar.day_of(now))
    ingest.record_events([view("u1", "/a", now), view("u2", "/b", now), view("u3", "/b", now + 1)])

    def plant_former() -> None:
        redis_client.set(keys.former_page_views(day), 10, ex=5000)
        redis_client.zadd(keys.former_path_views(day), {"/a": 4, "/c": 6})
        redis_client.expire(keys.former_path_views(day), 5000)

    plant_former()
    call_command("activity_upgrade")
    assert "folded 1 days of page counts into the path partitions" in capsys.readouterr().out
    assert sessions.page_views(calendar.day_of(now)) == 3 + 10
    assert sessions.top_paths(calendar.day_of(now)) == [("/c", 6), ("/a", 1 + 4), ("/b", 2)]
    assert not redis_client.exists(keys.former_page_views(day), keys.former_path_views(day))
    c_partition = partitioning.partition_of("/c", sessions_store.PATH_PARTITIONS)
    if c_partition not in {partitioning.partition_of(path, sessions_store.PATH_PARTITIONS) for path in ("/a", "/b")}:
        assert 4990 <= redis_client.ttl(keys.path_views(c_partition, day)) <= 5000  # made by the fold
    plant_former()
    call_command("activity_upgrade")
    assert "folded 0 days of page counts" in capsys.readouterr().out
    assert sessions.page_views(calendar.day_of(now)) == 13 and sessions.top_paths(calendar.day_of(now), 1) == [
        ("/c", 6)
    ]
    assert not redis_client.exists(keys.former_page_views(day), keys.former_path_views(day))
    assert_every_key_has_a_ttl(redis_client)


# --- the middleware -------------------------------------------------------------------------------


@pytest.fixture
def member_client(member) -> Client:
    client = Client()
    client.force_login(member)
    return client


@pytest.mark.urls(__name__)
def test_middleware_records_html_gets_only(member_client, member, redis_client, monkeypatch):
    monkeypatch.setattr(sessions, "EXCLUDE_PATHS", ("/private/",))
    member_client.get("/pricing?utm=x")
    member_client.get("/data.json")
    member_client.post("/pricing")
    member_client.get("/private/area")
    member_client.get("/missing")
    assert [e["path"] for e in stored(redis_client, str(member.pk))] == ["/pricing"]
    assert redis_client.hget(keys.viewer(str(member.pk)), keys.VIEWER_NAME) == member.get_username()
    monkeypatch.setattr(middleware, "PAGE_CONTENT_TYPES", ("text/html", "application/json"))
    member_client.get("/data.json")
    assert stored(redis_client, str(member.pk))[-1]["path"] == "/data.json"


@pytest.mark.urls(__name__)
def test_a_tracked_page_view_still_costs_one_round_trip(member_client, member, redis_client):
    member_client.get("/pricing")  # warm: connection open, scripts loaded
    member_client.get("/data.json")
    with probe(redis_client) as last_seen_only:
        member_client.get("/data.json")
    with probe(redis_client) as with_session:
        member_client.get("/pricing")
    assert last_seen_only.client_sends == with_session.client_sends == 1
    assert last_seen_only.server_reads == with_session.server_reads == 1
    # Inside that one round trip: the last-seen EVALSHA and the group index's HMGET, plus the page
    # view's EVALSHAs: session, page counts, viewers, pages now's record and prune, and the count of
    # the transitions the session queued on each day it declares (two within a minute of midnight);
    # today's first visit and active-user bit were written by the warm-up requests, and this
    # process remembers it: ingest.PROCESS_DAY_WRITES.
    now = clock.now()
    days = len(sessions_store.session_days(conf.settings.SESSION_WINDOW, now, now))
    assert (last_seen_only.commands["evalsha"], last_seen_only.commands["hmget"]) == (1, 1)
    assert with_session.commands["evalsha"] == 1 + 5 + days
    assert with_session.commands["multi"] == with_session.commands["exec"] == 0
    assert len(stored(redis_client, str(member.pk))) == 2


def test_probe_of_nothing_counts_nothing(redis_client):
    with probe(redis_client) as nothing:
        pass
    assert (nothing.client_sends, nothing.server_reads, sum(nothing.commands.values())) == (0, 0, 0)


# --- the API --------------------------------------------------------------------------------------


def test_session_pages_cover_every_view_once_most_recent_first(staff_api, redis_client):
    base = clock.now() - 30
    ingest.record_events([view("42", f"/p{i}", base + i) for i in range(23)])
    url, seen, visited = "/api/v1/users/42/session/?page_size=5", [], []
    while url:
        answer = staff_api.get(url)
        visited.append(answer.wsgi_request.build_absolute_uri())
        assert answer.status_code == 200, answer.data
        assert answer.data["count"] == 23 and answer.data["user"] == "42"
        assert 0 < answer.data["expires_in"] <= conf.settings.SESSION_WINDOW
        assert answer.data["previous"] == (visited[-2] if len(visited) > 1 else None)
        assert all(row["at"].endswith("Z") for row in answer.data["results"])
        seen += [row["path"] for row in answer.data["results"]]
        url = answer.data["next"]
    assert len(visited) == 5
    assert seen == [f"/p{i}" for i in range(22, -1, -1)]


@pytest.mark.parametrize(
    ("query", "field"),
    [("page_size=0", "page_size"), ("page_size=501", "page_size"), ("page=0", "page"), ("page=x", "page")],
)
def test_bad_paging_is_a_400(staff_api, redis_client, query, field):
    ingest.record_events([view("42", "/a")])
    answer = staff_api.get(f"/api/v1/users/42/session/?{query}")
    assert answer.status_code == 400
    assert field in answer.data


def test_no_live_session_or_page_past_the_end_is_a_404(staff_api, redis_client):
    assert staff_api.get("/api/v1/users/42/session/").status_code == 404
    ingest.record_events([view("42", "/a")])
    assert staff_api.get("/api/v1/users/42/session/?page=2").status_code == 404


def test_users_read_their_own_session_only(member_api, member, redis_client):
    ingest.record_events([view(str(member.pk), "/mine"), view("someone", "/theirs")])
    mine = member_api.get(f"/api/v1/users/{member.pk}/session/")
    assert mine.status_code == 200 and mine.data["results"][0]["path"] == "/mine"
    assert member_api.get("/api/v1/users/someone/session/").status_code == 403
