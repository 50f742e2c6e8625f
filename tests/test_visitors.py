"""Visitors and audience figures against the run's real Redis: first visit, actives, uniques, harvest."""

from __future__ import annotations

import hashlib
import random
import re
import secrets
import threading
from datetime import UTC, date, datetime, timedelta

import pytest
import redis
from django.conf import settings
from django.core.signing import Signer
from django.test import override_settings
from django.urls import reverse

from activity import calendar, clock, conf
from activity.errors import DayOutOfRange
from activity.events import Event
from activity.models import DailyRollup
from activity.schedule import rollup as rollup_schedule
from activity.services import audience, ingest, sweep, traffic
from activity.store import audience as store
from activity.store import families, keys, lifetimes
from activity.store.client import get_client
from activity.store.last_seen import partition_count
from activity.store.scripts import LUA_DIR, LuaScript
from activity.tasks import rollup_day as rollup_task
from activity.web import middleware
from tests.clients import APIClient, Client
from tests.last_seen_state import stored
from tests.redis_counts import CommandDelta, command_calls
from tests.redis_probe import RoundTrips

NOON = datetime(2026, 11, 23, 12, tzinfo=UTC).timestamp()
DAY = 86400


@pytest.fixture
def at(at):
    """The service clock at NOON, and ``at(ts)`` to move it (conftest's ``at``)."""
    at(NOON)
    return at


def visitor_id(n: int) -> str:
    """A fixed 128-bit id: HyperLogLog counts of a fixed set are deterministic, random ones may collide."""
    return hashlib.sha256(f"visitor-{n}".encode()).hexdigest()[:32]


def visit(visitor: str, ts: float = NOON) -> int:
    return ingest.record_events([], visitors=[(visitor, ts)]).new_visitors


def run_threads(count: int, target) -> list:
    results: list = [None] * count
    barrier = threading.Barrier(count)

    def work(index: int) -> None:
        barrier.wait()
        results[index] = target(index)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def commandstats(client) -> dict[str, int]:
    return {f"cmdstat_{name}": calls for name, calls in command_calls(client).items()}


@pytest.fixture
def round_trips(redis_client):
    """Counts the store's round trips (a pipeline is one). Every script is loaded first, so a test run
    alone counts no NOSCRIPT recovery."""
    for script in LUA_DIR.glob("*.lua"):
        redis_client.script_load(LuaScript(script.stem).source)
    with RoundTrips() as sent:
        yield sent


# --- first visit ever ---------------------------------------------------------------------------


def test_ten_threads_racing_one_new_visitor_count_one(at):
    visitor = visitor_id(1)
    assert sum(run_threads(10, lambda _: visit(visitor))) == 1
    figures = audience.stats()
    assert figures.new_visitors_day == 1
    assert figures.unique_visitors_day == 1


def test_returning_visitor_on_a_later_day_is_not_new(at):
    visitor = visitor_id(2)
    assert visit(visitor) == 1
    assert visit(visitor) == 0
    at(NOON + DAY)
    assert visit(visitor, NOON + DAY) == 0
    figures = audience.stats()
    assert (figures.new_visitors_day, figures.unique_visitors_day) == (0, 1)


def test_signed_in_user_is_a_visitor_under_their_user_id_but_anonymous_is_not_a_user(at, redis_client):
    assert ingest.record_events([Event(user="42", ts=NOON)]).new_visitors == 1
    assert ingest.record_events([Event(user="42", ts=NOON + 5)]).new_visitors == 0
    visit(visitor_id(3))
    figures = audience.stats()
    assert (figures.new_visitors_day, figures.unique_visitors_day, figures.active_day) == (2, 2, 1)
    assert list(stored(redis_client)) == ["42"]


# --- active users and unique visitors -----------------------------------------------------------


def test_exact_actives_over_ten_days_equal_the_set_sizes(at):
    # 2026-10-26 is a Monday: the ten days cross a week and a month boundary.
    first = date(2026, 10, 26)
    rng = random.Random(5)
    seen: dict[date, set[str]] = {}
    for n in range(10):
        day = first + timedelta(days=n)
        ts = datetime(day.year, day.month, day.day, 9, tzinfo=UTC).timestamp()
        at(ts)
        users = {str(uid) for uid in rng.sample(range(1, 20_000), 1500)}
        seen[day] = users
        batch = [Event(user=u, ts=ts + i % 3600) for i, u in enumerate(sorted(users))]
        for start in range(0, len(batch), 1000):
            ingest.record_events(batch[start : start + 1000])
        figures = audience.stats()
        week = set().union(*(seen[d] for d in seen if d.isocalendar()[:2] == day.isocalendar()[:2]))
        month = set().union(*(seen[d] for d in seen if (d.year, d.month) == (day.year, day.month)))
        assert (figures.active_day, figures.active_week, figures.active_month) == (
            len(users),
            len(week),
            len(month),
        )


def test_non_integer_ids_count_by_hyperloglog_beside_the_bitmap(at):
    ingest.record_events([Event(user=u, ts=NOON) for u in ("7", "alice", "007", "x@y")])
    assert audience.stats().active_day == 4


def test_unique_visitors_within_two_percent_on_100k_ids(at):
    rng = random.Random(7)
    ids = [f"{rng.getrandbits(128):032x}" for _ in range(100_000)]
    for start in range(0, len(ids), 5000):
        ingest.record_events([], visitors=[(v, NOON) for v in ids[start : start + 5000]])
    figures = audience.stats()
    assert figures.new_visitors_day == 100_000  # exact: one HSETNX per id
    for estimate in (figures.unique_visitors_day, figures.unique_visitors_week, figures.unique_visitors_month):
        assert abs(estimate - 100_000) <= 2000


def test_every_key_has_a_ttl_beyond_a_month_and_first_visits_one_of_400_to_500_days(at, redis_client):
    ingest.record_events([Event(user="1", ts=NOON), Event(user="bob", ts=NOON)])
    visit(visitor_id(4))
    audience.stats()
    long_lived = {keys.first_day(), keys.dense_ids(), keys.dense_ids_next()}
    long_lived |= {key for i in range(16) for key in (keys.last_seen(i), keys.last_seen_dirty(i))}
    found = list(redis_client.scan_iter(match=f"{conf.settings.KEY_PREFIX}*"))
    assert any(":gen:" in key for key in found)
    for key in found:
        ttl = redis_client.ttl(key)
        if key in long_lived:
            assert ttl == -1, key
        elif re.search(r"\{vis:\d+\}:gen:", key):  # until 400 days past the end of the generation
            assert (
                lifetimes.VISITORS.keep_days * DAY
                < ttl
                <= (lifetimes.VISITORS.keep_days + lifetimes.VISITORS.days) * DAY
            ), key
        else:  # a day's, week's or month's key: kept past the last day of its period
            assert re.search(r":(day|new|week|month):", key), key
            assert ttl > 32 * DAY, key


def test_a_first_visit_is_remembered_400_days_after_the_last_visit_and_forgotten_by_500(at):
    early, late, moved, gone = (visitor_id(n) for n in range(20, 24))
    assert sum(visit(visitor) for visitor in (early, late, moved, gone)) == 4

    def visit_on(visitor: str, days: int) -> int:
        at(NOON + days * DAY)
        return visit(visitor, NOON + days * DAY)

    assert visit_on(moved, 399) == 0  # the entry moves into the generation of day 399
    assert visit_on(gone, 399) == 0
    assert visit_on(early, 400) == 0  # 400 days after its last visit: still remembered
    assert visit_on(late, 501) == 1  # past the bound: a new visitor again
    assert visit_on(moved, 399 + 400) == 0  # remembered from its latest visit, not its first
    assert visit_on(gone, 399 + 501) == 1


def test_a_batch_checks_first_visits_in_a_call_per_shard_and_a_known_visitor_in_one_command(at, redis_client):
    earlier = NOON - 150 * DAY  # generation 206, older than NOON's and still alive
    at(earlier)
    ingest.record_events([], visitors=[(visitor_id(n), earlier) for n in range(3000, 3300)])  # in every shard
    batch = [visitor_id(n) for n in range(2000, 3000)]
    at(NOON)
    with CommandDelta(redis_client) as first:
        assert ingest.record_events([], visitors=[(visitor, NOON) for visitor in batch]).new_visitors == 1000
    at(NOON + DAY)
    with CommandDelta(redis_client) as again:
        assert ingest.record_events([], visitors=[(visitor, NOON + DAY) for visitor in batch]).new_visitors == 0
    shards = len({store.visitor_home(bytes.fromhex(visitor), calendar.day_of(NOON))[1] for visitor in batch})
    assert shards == store.VISITOR_SHARDS
    # A first-visit call per shard and the unique visitors' one, whatever the batch's size.
    assert first.calls["evalsha"] == again.calls["evalsha"] == shards + 1
    assert first.calls["hget"] == 1000  # a new id looked up in the one older generation that exists
    assert (again.calls["hsetnx"], again.calls["hget"]) == (1000, 0)  # a known one: one command


def test_a_first_visit_kept_before_generations_is_merged_by_the_sweep_and_keeps_its_day(at, redis_client):
    kept, early, late = (bytes.fromhex(visitor_id(n)) for n in (30, 31, 32))
    homes = {visitor: store.visitor_home(visitor, calendar.day_of(NOON))[0] for visitor in (kept, early, late)}
    legacy = {homes[visitor][-1] for visitor in homes}
    assert all(re.search(r"\{vis:\d+\}:seen:\d+$", key) for key in legacy)  # the old layout's keys
    for visitor, day in ((kept, 20000), (early, 20001), (late, 20002)):  # no TTL, as releases before left them
        redis_client.hset(homes[visitor][-1], visitor, day)
    # Before the first sweep after the upgrade a returning visitor counts as new, once (CHANGELOG.md).
    assert visit(early.hex()) == 1
    redis_client.hset(homes[late][0], late, 20001)  # in both, the generation's day the earlier one
    assert sweep.sweep().merged == len(legacy)
    assert redis_client.exists(*legacy) == 0
    at(NOON + DAY)
    assert sum(visit(visitor.hex(), NOON + DAY) for visitor in (kept, early, late)) == 0
    first_days = [redis_client.hget(homes[visitor][0], visitor) for visitor in (kept, early, late)]
    assert first_days == ["20000", "20001", "20001"]  # the earlier day of both, wherever it was
    assert all(redis_client.ttl(homes[visitor][0]) > lifetimes.VISITORS.keep_days * DAY for visitor in homes)


def test_the_sweep_merges_a_legacy_hash_larger_than_one_step(at, redis_client, monkeypatch):
    monkeypatch.setattr(store, "MERGE_STEP", 100)
    visitors = [bytes.fromhex(visitor_id(n)) for n in range(1000, 1600)]
    legacy = keys.visitor_seen(3, 7)
    redis_client.hset(legacy, mapping=dict.fromkeys(visitors, 20000))
    assert redis_client.object("encoding", legacy) == "hashtable"  # so HSCAN returns about a step a call
    with CommandDelta(redis_client) as calls:
        assert sweep.sweep().merged == 1
    assert redis_client.exists(legacy) == 0
    assert redis_client.hlen(keys.visitor_generation(3, lifetimes.VISITORS.of(calendar.day_of(NOON)))) == 600
    assert 6 <= calls.calls["hscan"] <= 12  # a bounded step a call, then another call


@pytest.mark.urls("tests.pages")
@pytest.mark.django_db
def test_a_thousand_harvested_cookies_grow_no_long_lived_key_and_expire_within_the_bound(at, redis_client):
    ingest.record_events([Event(user=str(n), ts=NOON) for n in range(1, 50)])  # long-lived keys exist
    everything = f"{conf.settings.KEY_PREFIX}*"

    def long_lived() -> dict[str, int]:
        found = (key for key in redis_client.scan_iter(match=everything, count=1000) if redis_client.ttl(key) == -1)
        return {key: redis_client.memory_usage(key) for key in found}

    before, kept = set(redis_client.scan_iter(match=everything, count=1000)), long_lived()
    assert kept
    harvester = Client()
    for _ in range(1000):
        harvester.cookies.clear()
        harvester.get("/pricing")  # a freshly signed cookie, as the middleware issues it
        harvester.get("/pricing")  # sent back once: one first visit
    assert audience.stats().new_visitors_day == 49 + 1000  # signed-in users are visitors too
    assert long_lived() == kept  # no key without a TTL was created or grew by a byte
    created = set(redis_client.scan_iter(match=everything, count=1000)) - before
    assert first_visit_store(redis_client)[1] == 49 + 1000
    bound = (lifetimes.VISITORS.keep_days + lifetimes.VISITORS.days) * DAY  # docs/visitors.md, docs/key-schema.md
    for key in created:
        assert families.family_of(key)[0].lifetime.kind != "long-lived", key
        assert 0 < redis_client.ttl(key) <= bound, key
        if ":gen:" in key:
            assert redis_client.ttl(key) > lifetimes.VISITORS.keep_days * DAY, key


# --- harvest and rollup -------------------------------------------------------------------------


def harvest(day: date) -> int:
    return store.harvest(get_client(), day, clock.now()).new_visitors


def test_harvest_racing_increments_loses_nothing(at, redis_client):
    writers, per_writer = 4, 300
    done = threading.Event()
    harvested: list[int] = []

    def harvester() -> None:
        while not done.is_set():
            harvested.append(harvest(date(2026, 11, 23)))

    thread = threading.Thread(target=harvester)
    thread.start()
    sent = run_threads(
        writers,
        lambda _: sum(visit(secrets.token_hex(16)) for _ in range(per_writer)),
    )
    done.set()
    thread.join()
    assert sum(sent) == writers * per_writer
    assert len(harvested) > 1  # the harvests really interleaved with the increments
    assert harvest(date(2026, 11, 23)) == writers * per_writer
    name = calendar.day_name(date(2026, 11, 23))
    assert all(redis_client.get(keys.new_visitors(s, name)) is None for s in range(store.VISITOR_SHARDS))
    assert audience.stats().new_visitors_day == writers * per_writer


@pytest.mark.django_db
def test_rollup_is_idempotent_keeps_harvested_counts_and_counts_sessions(at):
    day = date(2026, 11, 23)
    for n in range(5):
        ingest.record_events([Event(user=str(n), ts=NOON, path="/a"), Event(user=str(n), ts=NOON, path="/b")])
    ingest.record_events([], kind=traffic.BOT, requests=4)  # a batch of four crawler requests
    ingest.record_events([Event(user="token-user", ts=NOON)], kind=traffic.MACHINE, requests=2)
    visit(visitor_id(5))
    harvest(day)  # a run that harvested and died before writing the database
    at(NOON + DAY)
    ingest.record_events([], kind=traffic.BOT)  # the next day's: not in this day's row
    row = rollup_task(day.isoformat())
    figures = {"active_users": 5, "sessions": 5, "page_views": 10, "bot_requests": 4, "machine_requests": 2}
    assert row == {"day": "2026-11-23", **figures, "new_visitors": 6, "unique_visitors": 6}
    visit(visitor_id(6), NOON + 600)  # a late event of that day
    audience.rollup_day(day)
    audience.rollup_day(day)
    saved = DailyRollup.objects.get(day=day)
    assert (saved.active_users, saved.new_visitors, saved.unique_visitors) == (5, 7, 7)
    assert (saved.sessions, saved.page_views, saved.bot_requests, saved.machine_requests) == (5, 10, 4, 2)
    assert rollup_task() == {"day": "2026-11-23", **figures, "new_visitors": 7, "unique_visitors": 7}
    assert DailyRollup.objects.count() == 1


@pytest.mark.django_db
def test_rollup_refuses_future_and_expired_days(at):
    with pytest.raises(DayOutOfRange):
        audience.rollup_day(date(2026, 11, 24))
    with pytest.raises(DayOutOfRange):
        audience.rollup_day(date(2026, 11, 23) - timedelta(days=lifetimes.KEEP_DAYS + 1))


def test_rollup_beat_runs_hourly_so_after_any_local_midnight_and_expires():
    for entry in rollup_schedule().values():
        assert entry["task"] == "activity.rollup_day"
        assert entry["schedule"].minute == {5}
        assert entry["schedule"].hour == set(range(24))
        assert entry["options"]["expires"] <= 3600


# --- middleware: the visitor cookie and one round trip ------------------------------------------


def first_visit_store(client) -> tuple[int, int, int]:
    """(hashes, fields, bytes by MEMORY USAGE) of the first-visit store: generations and legacy."""
    found = [
        key
        for kind in ("gen", "seen")
        for key in client.scan_iter(match=f"{keys.prefix()}{{vis:*}}:{kind}:*", count=1000)
    ]
    return len(found), sum(client.hlen(key) for key in found), sum(client.memory_usage(key) for key in found)


@pytest.mark.django_db
def test_anonymous_visitor_gets_a_secure_signed_cookie_and_counts_once_it_comes_back(at, redis_client, round_trips):
    browser = Client(REMOTE_ADDR="203.0.113.9")
    first = browser.get("/admin/login/", secure=True)
    cookie = first.cookies[middleware.VISITOR_COOKIE_NAME]
    visitor = middleware.visitor_from_cookie(cookie.value)
    assert visitor is not None and re.fullmatch(r"[0-9a-f]{32}", visitor)
    assert cookie["secure"] is True and cookie["httponly"] is True and cookie["samesite"] == "Lax"
    assert int(cookie["max-age"]) == middleware.VISITOR_COOKIE_AGE
    plain = Client(REMOTE_ADDR="203.0.113.9").get("/admin/login/").cookies[middleware.VISITOR_COOKIE_NAME]
    assert not plain["secure"]  # over plain HTTP (a development site), a cookie the browser keeps
    assert round_trips.count == 0  # nothing recorded until the browser sends the cookie back
    for _ in range(3):
        again = browser.get("/admin/login/")
        assert middleware.VISITOR_COOKIE_NAME not in again.cookies
    # Then one round trip records the visit; the next ones that day are remembered by this process
    # (ingest.DAY_WRITES_CACHE): each page view sends only its entry of the visitor's session.
    assert round_trips.count == 3
    other = Client(REMOTE_ADDR="203.0.113.9").get("/admin/login/")
    assert middleware.visitor_from_cookie(other.cookies[middleware.VISITOR_COOKIE_NAME].value) != visitor
    figures = audience.stats()
    assert (figures.new_visitors_day, figures.unique_visitors_day, figures.online) == (1, 1, 0)
    assert first_visit_store(redis_client)[:2] == (1, 1)
    assert stored(redis_client) == {}


@pytest.mark.django_db
def test_cookieless_and_forged_cookie_requests_add_nothing_and_count_no_visitor(at, redis_client):
    name = middleware.VISITOR_COOKIE_NAME
    probe = Client()
    before = first_visit_store(redis_client)
    with CommandDelta(redis_client) as delta:
        for n in range(300):
            probe.cookies.clear()  # a bot, curl or uptime probe: never sends the cookie back
            if n % 3 == 1:
                probe.cookies[name] = secrets.token_hex(16)  # an id we never minted
            elif n % 3 == 2:
                probe.cookies[name] = f"{secrets.token_hex(16)}:forged-signature"
            response = probe.get("/admin/login/")
            assert middleware.visitor_from_cookie(response.cookies[name].value) is not None  # a fresh one
    assert delta.calls == {}  # not one Redis command
    assert first_visit_store(redis_client) == before == (0, 0, 0)  # keys, fields, bytes
    browser = Client()
    for _ in range(3):
        browser.get("/admin/login/")
    hashes, fields, _ = first_visit_store(redis_client)
    assert (hashes, fields) == (1, 1)
    figures = audience.stats()
    assert (figures.new_visitors_day, figures.unique_visitors_day) == (1, 1)


def test_a_verified_cookie_is_remembered_per_secret_key_so_a_key_change_still_refuses_it():
    """Signatures are checked once per process (``_unsigned_visitor``'s cache); the key is part of
    what is remembered, so a cookie of a replaced key is refused, and of a fallback key accepted."""
    with override_settings(SECRET_KEY="old-" + secrets.token_hex(16)):
        cookie = Signer(salt=middleware.VISITOR_SIGNER_SALT).sign(secrets.token_hex(16))
        visitor = middleware.visitor_from_cookie(cookie)
        assert visitor is not None and middleware.visitor_from_cookie(cookie) == visitor
        old = settings.SECRET_KEY
    with override_settings(SECRET_KEY="new-" + secrets.token_hex(16)):
        assert middleware.visitor_from_cookie(cookie) is None
        with override_settings(SECRET_KEY_FALLBACKS=[old]):
            assert middleware.visitor_from_cookie(cookie) == visitor
    forged = cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB")
    with override_settings(SECRET_KEY=old):
        assert middleware.visitor_from_cookie(cookie) == visitor
        assert middleware.visitor_from_cookie(forged) is None


def no_consent(request) -> bool:
    return request.COOKIES.get("consent") == "yes"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "overrides",
    [{"ACTIVITY_VISITOR_COOKIES": "false"}, {"ACTIVITY_VISITOR_CONSENT": "tests.test_visitors.no_consent"}],
)
def test_no_cookie_and_nothing_recorded_without_consent(at, overrides):
    with override_settings(**overrides):
        response = Client().get("/admin/login/")
    assert middleware.VISITOR_COOKIE_NAME not in response.cookies
    assert audience.stats().unique_visitors_day == 0


@pytest.mark.django_db
def test_consent_callable_saying_yes_sets_the_cookie(at):
    browser = Client()
    browser.cookies["consent"] = "yes"
    with override_settings(ACTIVITY_VISITOR_CONSENT="tests.test_visitors.no_consent"):
        response = browser.get("/admin/login/")
    assert middleware.VISITOR_COOKIE_NAME in response.cookies


def test_signed_in_user_gets_no_cookie_and_one_round_trip(at, staff, round_trips):
    browser = Client()
    browser.force_login(staff)
    response = browser.get("/admin/login/", follow=False)
    assert middleware.VISITOR_COOKIE_NAME not in response.cookies
    assert round_trips.count == 1
    assert audience.stats().active_day == 1


# --- the stats endpoint -------------------------------------------------------------------------


def test_stats_needs_staff_and_has_the_api_shape(at, member_api, staff_api):
    assert APIClient().get(reverse("activity:stats")).status_code == 401
    assert member_api.get(reverse("activity:stats")).status_code == 403
    ingest.record_events([Event(user="1", ts=NOON - 10), Event(user="ann", ts=NOON)])
    visit(visitor_id(7))
    response = staff_api.get(reverse("activity:stats"))
    assert response.status_code == 200
    assert response.json() == {
        "online": 2,
        "active": {"day": 2, "week": 2, "month": 2},
        "new_visitors": {"day": 3},
        "unique_visitors": {"day": 3, "week": 3, "month": 3},
        "bots": {"day": 0},
        "machines": {"day": 0},
        "day": "2026-11-23",
    }


def test_stats_is_one_round_trip_of_bounded_commands(at, redis_client, round_trips):
    ingest.record_events([Event(user="1", ts=NOON - 10), Event(user="ann", ts=NOON)])
    before = commandstats(redis_client)
    trips = round_trips.count
    figures = audience.stats()
    assert round_trips.count - trips == 1
    after = commandstats(redis_client)
    delta = {name: after[name] - before.get(name, 0) for name in after if after[name] != before.get(name, 0)}
    assert delta.pop("cmdstat_info") >= 1  # the helper's own (one per primary on a cluster)
    # No union of days: each figure is a count of one key, a bitmap in ranges of at most 1 MiB.
    chunks = -(-(store.MAX_PEOPLE // 8 + 1) // store.COUNT_CHUNK_BYTES)
    assert delta == {
        "cmdstat_zcount": partition_count(),  # the online count: one a last-seen partition
        "cmdstat_bitcount": 3 * chunks,  # day, week, month
        "cmdstat_pfcount": 3,  # anonymous visitors: day, week, month
        "cmdstat_get": 2 * store.VISITOR_SHARDS,
        "cmdstat_hmget": 1,  # requests of bots and machines
    }
    assert (figures.online, figures.active_week, figures.active_month) == (2, 2, 2)


def test_cached_week_and_month_count_todays_new_users_at_once(at):
    ingest.record_events([Event(user="1", ts=NOON), Event(user="ann", ts=NOON)])  # Monday
    visit(visitor_id(9))
    at(NOON + 2 * DAY)  # Wednesday
    first = audience.stats()  # the unions of the week and month are cached now
    assert (first.active_day, first.active_week, first.unique_visitors_week) == (0, 2, 3)
    ts = NOON + 2 * DAY
    ingest.record_events([Event(user="2", ts=ts), Event(user="bob", ts=ts), Event(user="1", ts=ts)])
    figures = audience.stats()
    assert (figures.active_day, figures.active_week, figures.active_month) == (3, 4, 4)
    assert (figures.unique_visitors_day, figures.unique_visitors_week, figures.unique_visitors_month) == (3, 5, 5)


def test_first_visit_survives_a_script_flush_in_the_request_pipeline(at, redis_client):
    redis_client.script_flush()
    visitor = visitor_id(8)
    assert visit(visitor) == 1
    redis_client.script_flush()
    assert visit(visitor) == 0
    assert audience.stats().new_visitors_day == 1


def test_scripts_check_their_arguments_and_change_nothing(redis_client):
    counter, erased = keys.new_visitors(0, "20261123"), keys.tombstones("vis:0")
    seen, legacy = keys.visitor_generation(0, 207), keys.visitor_seen(0, 0)
    with pytest.raises(redis.ResponseError, match="first_visit"):
        store.FIRST_VISIT(redis_client, [counter, erased, seen], [20415, 60, NOON, 60, b"x" * 16])
    with pytest.raises(redis.ResponseError, match="first_visit"):
        store.FIRST_VISIT(redis_client, [counter, erased, *[seen] * 6], [20415, 60, NOON, 60, b"x" * 16])
    for args in ([60], [0, 10], [60, 0]):
        with pytest.raises(redis.ResponseError, match="merge_visitors"):
            store.MERGE_VISITORS(redis_client, [legacy, seen], args)
    for ttls in ((0, 60), (60, 0)):
        with pytest.raises(redis.ResponseError, match="ttls"):
            store.FIRST_VISIT(redis_client, [counter, erased, *[seen] * 5], [20415, ttls[0], NOON, ttls[1], b"x" * 16])
    with pytest.raises(redis.ResponseError, match="harvest_counter"):
        store.HARVEST_COUNTER(redis_client, [counter], [60])
    assert redis_client.exists(counter, seen) == 0
