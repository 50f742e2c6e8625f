"""Pages now (docs/live.md): each online person's latest page, counted exactly whatever the order
views arrive in, people gone offline taken out in bounded calls, erased people forgotten."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import redis

from activity import conf
from activity.events import Event, iso
from activity.services import ingest, pages_now, privacy, traffic
from activity.store import keys
from activity.store import pages_now as store
from activity.store.client import get_client
from tests.clients import APIClient
from tests.redis_counts import CommandDelta

T = 1_795_000_000.0
WINDOW = 300


def expected(history: list[tuple[str, float, str]], now: float, window: float = WINDOW) -> list[tuple[str, int]]:
    """Brute force: each person's latest view (the first recorded of equal times), online when at
    ``now - window`` or later; pages by people, most first, ties by path."""
    latest: dict[str, tuple[float, str]] = {}
    for person, ts, path in history:
        if person not in latest or ts > latest[person][0]:
            latest[person] = (ts, path)
    counts = Counter(path for ts, path in latest.values() if ts >= now - window)
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))


def record(history: list[tuple[str, float, str]]) -> None:
    """Users' views as events, visitors' as the middleware hands them."""
    events = [Event(person[2:], ts, path) for person, ts, path in history if person.startswith("u:")]
    visitors = [(person[2:], ts) for person, ts, _ in history if person.startswith("v:")]
    visitor_views = [(person[2:], ts, path) for person, ts, path in history if person.startswith("v:")]
    ingest.record_events(events, visitors=visitors, visitor_views=visitor_views)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_counts_match_a_replay_of_every_history(redis_client, at, seed):
    """Random users and visitors, views out of order and around the window's edge, time moving on
    between batches: after each batch the ranking is the brute force's, for every n."""
    rng = random.Random(seed)
    people = [f"u:{n}" for n in range(12)] + [f"v:{n:032x}" for n in range(12)]
    paths = [f"/p{n}" for n in range(6)]
    history: list[tuple[str, float, str]] = []
    now = T
    for _ in range(12):
        now += rng.choice([1, 30, 200, 400])
        at(now)
        batch = [
            (rng.choice(people), round(now - rng.uniform(0, 2 * WINDOW), 3), rng.choice(paths))
            for _ in range(rng.randint(1, 15))
        ]
        record(batch)
        history += batch
        assert store.top(get_client(), now - WINDOW, 100) == expected(history, now)
        assert store.top(get_client(), now - WINDOW, 2) == expected(history, now)[:2]


def test_a_late_view_never_moves_a_person_back(redis_client, at):
    at(T)
    record([("u:1", T, "/new"), ("u:1", T - 10, "/old"), ("v:" + "a" * 32, T - 5, "/old")])
    assert pages_now.top() == [{"path": "/new", "people": 1}, {"path": "/old", "people": 1}]


def test_a_read_takes_out_everyone_gone_in_bounded_calls(redis_client, at, monkeypatch):
    """2,500 people gone offline with no write since: the read takes them out 1,000 a call, one
    round trip each, then answers only the online one."""
    at(T)
    record([(f"u:{n}", T, f"/p{n % 7}") for n in range(2500)])
    at(T + 100)
    record([("u:last", T + 100, "/here")])
    at(T + WINDOW + 50)
    client = get_client()
    with CommandDelta(client) as delta:
        assert pages_now.top() == [{"path": "/here", "people": 1}]
    assert delta.calls["evalsha"] == 3  # 1,000 + 1,000 + 500, each call with its ZRANGE in one round trip
    assert client.zcard(keys.now_latest()) == 1 and client.hlen(keys.now_page()) == 1


def test_a_call_moves_each_time_with_a_command_and_each_page_once(redis_client, at):
    """200 people each viewing a page of 3 after one of 3 others: the record call moves each
    person's time with a ZADD of its own and reads no time back, then reads and writes the pages
    once each and counts each page once, not a command per view."""
    at(T)
    record([(f"u:{n}", T, f"/before{n % 3}") for n in range(200)])
    client = get_client()
    with CommandDelta(client) as delta:
        store_pipe = client.pipeline(transaction=False)
        store.queue_views(store_pipe, [(f"u:{n}", T + 1, f"/p{n % 3}") for n in range(200)], T - WINDOW, T + 1)
        store_pipe.execute()
    assert pages_now.top() == [{"path": f"/p{n}", "people": 67 - (n == 2)} for n in range(3)]
    # EXISTS, a ZADD GT CH per view, HMGET, HSET, a ZINCRBY per page (3 left, 3 entered), ZREM of the
    # 3 left and 3 EXPIREs; the prune that follows runs its own few.
    assert delta.calls["zadd"] == 200 and "zmscore" not in delta.calls
    assert delta.calls["hmget"] == 1 and delta.calls["hset"] == 1 and delta.calls["zincrby"] == 6
    assert sum(delta.calls.values()) < 200 + 30


@pytest.mark.parametrize("bad", ["soon", "nan", "1e999", f" {T}", "0x10"])
def test_a_bad_time_is_refused_and_writes_nothing(redis_client, bad):
    """Times that are not decimals as Python writes them, some of which Lua's tonumber takes while
    Redis's ZADD refuses them: the call checks every time before its first ZADD, so a batch is
    written whole or not at all."""
    state = [keys.now_latest(), keys.now_page(), keys.now_people()]
    client = get_client()
    with pytest.raises(redis.ResponseError, match="each view ts must be a number"):
        store.RECORD(client, [store.tombstones_key(), *state], [repr(T), 60, "u:1", repr(T), "/a", "u:2", bad, "/b"])
    assert client.exists(*state) == 0


def test_writes_take_out_twice_what_they_add(redis_client, at):
    at(T)
    record([(f"u:{n}", T, "/a") for n in range(100)])
    at(T + WINDOW + 1)
    record([(f"u:new{n}", T + WINDOW + 1, "/b") for n in range(10)])  # 10 views: 20 taken out
    assert get_client().zcard(keys.now_latest()) == 100 - 20 + 10


def test_the_keys_go_once_everyone_is_offline(redis_client, at):
    at(T)
    record([("u:1", T, "/a")])
    ttl = get_client().ttl(keys.now_people())
    assert WINDOW < ttl <= WINDOW + conf.settings.MAX_FUTURE_SKEW + 1
    for key in (keys.now_latest(), keys.now_page()):
        assert 0 < get_client().ttl(key) <= ttl


def test_bots_and_machines_are_not_people(redis_client, at):
    at(T)
    ingest.record_events([Event("1", T, "/a")], kind=traffic.BOT)
    ingest.record_events([Event("2", T, "/a")], kind=traffic.MACHINE)
    assert pages_now.top() == []


@pytest.mark.django_db
def test_an_erased_user_leaves_and_stays_out(redis_client, at):
    at(T)
    record([("u:1", T, "/a"), ("u:2", T, "/a")])
    assert privacy.export("1")["page_now"] == {"path": "/a", "ts": T, "at": iso(T)}
    privacy.erase("1")
    record([("u:1", T + 1, "/b")])  # a view still in flight
    assert pages_now.top() == [{"path": "/a", "people": 1}]


@pytest.mark.django_db
def test_the_api_answers_staff_and_checks_n(redis_client, at, staff, member):
    at(T)
    record([("u:1", T, "/a"), ("u:2", T, "/a"), ("u:3", T, "/b")])
    api = APIClient()
    api.force_authenticate(staff)
    answer = api.get("/api/v1/pages/now/", {"n": 1})
    assert answer.status_code == 200
    assert answer.json() == {"window": WINDOW, "results": [{"path": "/a", "people": 2}]}
    assert api.get("/api/v1/pages/now/").json()["results"][1] == {"path": "/b", "people": 1}
    for bad in ("0", "101", "x"):
        refused = api.get("/api/v1/pages/now/", {"n": bad})
        assert refused.status_code == 400 and "n" in refused.json()
    api.force_authenticate(member)
    assert api.get("/api/v1/pages/now/").status_code == 403
    assert APIClient().get("/api/v1/pages/now/").status_code == 401
