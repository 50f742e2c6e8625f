"""What users look at next: transitions counted by the page-view script (capped, with TTLs), a user's
recommendations (recency weights, session pages left out, one round trip when cached), weighted
random picks that follow the weights (chi-square), one rebuild per expiry, bad input and access."""

from __future__ import annotations

import json
import random
import re
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from unittest import mock

import pytest
from django.test import override_settings
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from activity import calendar, clock, conf
from activity.errors import UnknownPath
from activity.events import Event
from activity.services import ingest, recommendations, reports, sessions
from activity.store import keys
from activity.store import sessions as sessions_store
from activity.store.sessions import paths_slack
from tests.redis_counts import CommandDelta
from tests.redis_probe import probe
from tests.test_api import activity_keys
from tests.test_reports import concurrently, slowed

RECOMMENDATIONS = "/api/v1/users/{}/recommendations/"
NEXT = "/api/v1/pages/next/"
DAY = 86400


def today() -> str:
    return calendar.day_name(calendar.day_of(clock.now()))


def walk(user: str, *paths: str, ts: float | None = None) -> None:
    """One user's page views, in order, a millisecond apart."""
    start = clock.now() if ts is None else ts
    ingest.record_events([Event(user, start + i / 1000, path) for i, path in enumerate(paths)])


def seed(source: str, counts: dict[str, int], ts: float | None = None) -> None:
    """``counts[page]`` sessions each going from ``source`` to ``page`` (one user per session),
    recorded at ``ts`` (the clock moved there: only views within the session window join one)."""
    start = clock.now() if ts is None else ts
    events = []
    for page, count in counts.items():
        for n in range(count):
            user = f"seed:{source}:{page}:{n}"
            events += [Event(user, start, source), Event(user, start + 0.001, page)]
    with mock.patch.object(clock, "now", lambda: start + 1):
        for first in range(0, len(events), 1000):
            ingest.record_events(events[first : first + 1000])


def counted(source: str, day: str | None = None) -> dict[str, int]:
    """The steps from ``source`` on the day as stored: its members of the day's index ("source NUL
    next") with their counts in the day's transitions."""
    from activity.store.client import get_client

    client, day = get_client(), day or today()
    steps = client.zrangebylex(keys.transitions_index(day), f"[{source}\0", f"({source}\1")
    counts = client.zmscore(keys.transitions(day), steps) if steps else []
    return {step.split("\0", 1)[1]: int(count) for step, count in zip(steps, counts, strict=True)}


def steps_from(redis_client, source: str, day: str | None = None) -> int:
    """How many next pages ``source`` has on the day (its members of the index)."""
    return redis_client.zlexcount(keys.transitions_index(day or today()), f"[{source}\0", f"({source}\1")


def transition_keys(redis_client) -> set[str]:
    return set(redis_client.scan_iter(match=f"{keys.prefix()}{keys.SESSIONS_TAG}:next*", count=1000))


# --- transitions ---------------------------------------------------------------------------------


def test_each_step_of_a_session_is_counted_once_per_day_with_the_day_statistics_ttl(redis_client):
    walk("u1", "/a", "/b?utm=x", "/a", "/c", "/c")  # the last is a reload, not a step
    walk("u2", "/a", "/b")
    assert counted("/a") == {"/b": 2, "/c": 1}  # query strings dropped, as the session records them
    assert counted("/b") == {"/a": 1}
    assert counted("/c") == {}
    redis_client.delete(keys.session("u2"))  # the session ended: the next view starts a new one
    walk("u2", "/c")
    assert counted("/b") == {"/a": 1}
    for key in (keys.transitions(today()), keys.transitions_index(today())):
        assert redis_client.ttl(key) >= conf.settings.PAGE_STATS_DAYS * DAY - 60
    with override_settings(ACTIVITY_TRANSITIONS=False):
        walk("u1", "/d")
    assert counted("/c") == {}


def test_with_query_strings_kept_steps_keep_them_too(redis_client, monkeypatch):
    monkeypatch.setattr(sessions, "KEEP_QUERY", True)
    walk("u1", "/search?q=1", "/item?id=2")
    assert counted("/search?q=1") == {"/item?id=2": 1}


def test_steps_whose_count_never_ran_are_counted_by_later_batches_a_bounded_number_a_call(redis_client):
    """A batch's steps wait in the day's queue between its session calls and its count; if the count
    never ran (the connection lost between them), later batches' counts take them, in the order
    queued, each at most three steps per view of its own batch, until the queue is gone."""
    queue = keys.transition_steps(today())
    left = ["+/a\0/b", "+/b\0/a", "+/a\0/c", "-/a\0/c", "+/a\0/d", "+/d\0/b"]  # as session_record.lua queues
    redis_client.rpush(queue, *left)
    walk("v", "/x")  # one view, no step of its own: three of the queued counted
    assert counted("/a") == {"/b": 1, "/c": 1} and counted("/b") == {"/a": 1}
    walk("w", "/y")
    assert counted("/a") == {"/b": 1, "/d": 1} and counted("/d") == {"/b": 1}  # /a -> /c taken back
    assert not redis_client.exists(queue)
    walk("u", "/a", "/b")
    assert counted("/a")["/b"] == 2 and not redis_client.exists(queue)  # counted in the same round trip


# A counts test, not a latency one: a generous socket timeout for 1,000-view script calls on a loaded
# machine; the day's path cap and transition cap are lifted so every trim counted is a page's.
@override_settings(ACTIVITY_REDIS_TIMEOUT=10.0)
def test_next_pages_stay_capped_under_100k_distinct_transitions_and_the_most_frequent_survive(
    redis_client, monkeypatch
):
    monkeypatch.setattr(sessions_store, "MAX_PATHS_PER_DAY", 1_000_000)
    monkeypatch.setattr(sessions_store, "MAX_TRANSITIONS_PER_DAY", 1_000_000)
    cap = sessions_store.MAX_NEXT_PAGES
    slack = paths_slack(cap)
    popular = {f"/popular/{n}": n % 5 + 1 for n in range(20)}  # steps from the hub per batch
    sizes, fresh = [], iter(range(100_000))
    with CommandDelta(redis_client) as delta:
        for _ in range(100):
            events = []
            steps = [page for page, weight in popular.items() for _ in range(weight)]
            steps += [f"/n/{next(fresh)}" for _ in range(500)]  # 500 new pages a batch, each then back
            for i, page in enumerate(steps):  # hub -> page and page -> hub: 1,000 distinct steps a batch
                user = f"u{i % 10}"
                events += [Event(user, clock.now(), "/hub"), Event(user, clock.now(), page)]
            ingest.record_events(events)
            sizes.append(steps_from(redis_client, "/hub"))
    assert max(sizes) <= cap + slack
    assert sizes[-1] >= cap
    # A page's trim copies its steps (one ZRANGESTORE) and removes at most slack + 1 of them, once per
    # slack + 1 new ones: amortized, bounded.
    assert 0 < delta.calls["zrangestore"] <= 50_000 // (slack + 1)
    kept = counted("/hub")
    assert {page: kept[page] for page in popular} == {page: 100 * weight for page, weight in popular.items()}
    # The hub and 50,000 new pages with their one step back: still the day's two keys, with TTLs.
    assert transition_keys(redis_client) == {keys.transitions(today()), keys.transitions_index(today())}
    assert redis_client.zcard(keys.transitions(today())) == redis_client.zcard(keys.transitions_index(today())) > 50_000
    assert min(redis_client.ttl(key) for key in transition_keys(redis_client)) > 0


def test_a_pages_trim_drops_its_least_frequent_steps_ties_to_the_lowest_and_no_other_pages(redis_client):
    """lua/transitions_count.lua with a cap of 2 next pages and no slack: each new step past the cap
    trims the page to its 2 most frequent, the tie among those counted once going to the greater
    next page; "/a"'s trims leave "/ab" (whose steps sort right after "/a"'s) alone."""
    day = today()
    queued = ["+/a\0/b"] * 3 + ["+/a\0/c", "+/ab\0/x", "+/ab\0/y", "+/ab\0/z", "+/a\0/a", "+/a\0/d"]
    redis_client.rpush(keys.transition_steps(day), *queued)
    script_keys = [keys.transition_steps(day), keys.transitions(day), keys.transitions_index(day)]
    script_keys.append(keys.transitions_trim_scratch())
    # Next pages kept per page 2 (no slack), steps per day 1,000 (slack 0), 100 steps at most.
    taken = sessions_store.TRANSITIONS_COUNT(redis_client, script_keys, [3600, 2, 0, 1000, 0, 100])
    assert taken == len(queued)
    # "/a" -> "/a" came third: "/a"'s trim then dropped it (the lowest of the two counted once);
    # "/a" -> "/d" came fourth and dropped "/c".
    assert counted("/a") == {"/b": 3, "/d": 1}
    assert counted("/ab") == {"/y": 1, "/z": 1}  # its own trim, at "/z"
    assert redis_client.zcard(keys.transitions(day)) == redis_client.zcard(keys.transitions_index(day)) == 4
    assert not redis_client.exists(keys.transitions_trim_scratch())


def test_a_session_holding_an_earlier_releases_json_entries_goes_on_as_one_of_this_release(redis_client):
    """A session open at the upgrade holds JSON {"path", "ts"} entries until it ends: a view after
    them counts its step from the last, a late one goes before the first, and the page reads both."""
    now = round(clock.now(), 3)  # as ingest keeps it
    earlier = [json.dumps({"path": "/a", "ts": now - 3}), json.dumps({"path": "/c", "ts": now - 1})]
    redis_client.rpush(keys.session("u1"), *earlier)
    redis_client.pexpire(keys.session("u1"), 60_000)
    walk("u1", "/d", ts=now)
    walk("u1", "/z", ts=now - 4)
    assert counted("/c") == {"/d": 1}
    assert counted("/z") == {"/a": 1}
    page = sessions.page("u1")
    assert page is not None and page.views == [("/d", now), ("/c", now - 1), ("/a", now - 3), ("/z", now - 4)]
    assert sessions.started(calendar.day_of(now)) == 0  # the session went on: none started


NO_QUERY = st.characters(blacklist_characters="?")  # a path as the service records it


@hypothesis_settings(derandomize=True, database=None, deadline=None, max_examples=60)
@given(first=st.text(NO_QUERY, max_size=12), second=st.text(NO_QUERY, max_size=12))
def test_any_two_paths_come_back_from_a_session_as_they_went_in_and_count_their_step(first, second):
    """Entries are "<ts> <path>": whatever a path holds (spaces, "{", a NUL, nothing), the session
    page reads it back, and the session script reads the stored one to count the step from it."""
    first, second = f"/{first}", f"/{second}"
    user = f"any:{uuid.uuid4().hex}"
    now = round(clock.now(), 3)
    walk(user, first, second, ts=now)
    page = sessions.page(user)
    assert page is not None and page.views == [(second, round(now + 0.001, 3)), (first, now)]
    if first != second and "\0" not in first + second:
        assert counted(first).get(second, 0) >= 1  # other examples may have walked it too


# A counts test too: 100,000 distinct junk paths (a crawler walking invented URLs), 1,000 a batch
# through ingest, at the real bound: the day stays two keys, and each holds at most the bound plus
# its slack, after every batch.
@override_settings(ACTIVITY_REDIS_TIMEOUT=10.0)
def test_100k_junk_paths_keep_the_days_transitions_at_their_bound_and_the_frequent_steps_survive(
    redis_client, monkeypatch
):
    monkeypatch.setattr(sessions_store, "MAX_PATHS_PER_DAY", 1_000_000)  # only the day's trims below
    bound, slack = sessions_store.MAX_TRANSITIONS_PER_DAY, sessions_store.TRANSITIONS_PER_DAY_SLACK
    junk = iter(range(10**6))
    day_keys = {keys.transitions(today()), keys.transitions_index(today())}
    sizes, key_counts = [], []
    with CommandDelta(redis_client) as delta:
        for _ in range(100):
            events = [Event("crawler", clock.now(), f"/junk/{next(junk)}") for _ in range(1000)]
            for n in range(10):  # ten real steps, a few times each batch
                events += [Event(f"reader{n}", clock.now(), "/home"), Event(f"reader{n}", clock.now(), f"/doc/{n}")]
            ingest.record_events(events)
            assert transition_keys(redis_client) == day_keys  # two keys a day, whatever the paths
            sizes.append(
                (redis_client.zcard(keys.transitions(today())), redis_client.zcard(keys.transitions_index(today())))
            )
            key_counts.append(len(activity_keys(redis_client)))
    assert next(junk) == 100_000
    assert all(counts == indexed <= bound + slack for counts, indexed in sizes)  # both sets, every batch
    assert sizes[-1][0] >= bound  # 100,000 steps went in: the bound, not the traffic, limits the day
    assert len(set(key_counts)) == 1  # no key of any kind per path
    # A day's trim removes slack + 1 steps, once per slack + 1 new ones (here the only ZREMRANGEBYRANK).
    assert 1 <= delta.calls["zremrangebyrank"] <= 100_000 // (slack + 1)
    assert counted("/home") == {f"/doc/{n}": 100 for n in range(10)}
    assert min(redis_client.ttl(key) for key in transition_keys(redis_client)) > 0


# --- a user's recommendations ----------------------------------------------------------------------


def seed_around_a_and_b() -> None:
    seed("/a", {"/x": 3, "/y": 1})
    seed("/b", {"/y": 2, "/z": 2, "/a": 4})


def test_recent_pages_weigh_more_and_pages_of_the_session_are_left_out(member_api, member, redis_client):
    seed_around_a_and_b()
    me = str(member.pk)
    walk(me, "/a", "/b")  # /b is the latest (weight 1), /a the one before (1/2); this adds /a -> /b
    # /b: y 2/8, z 2/8, a 4/8 (in the session); /a: x 3/5, y 1/5, b 1/5 (in the session), halved.
    expected = [("/y", 2 / 8 + 1 / 5 / 2), ("/x", 3 / 5 / 2), ("/z", 2 / 8)]
    answer = member_api.get(RECOMMENDATIONS.format(me))
    assert answer.status_code == 200
    assert answer.data["user"] == me
    assert [row["path"] for row in answer.data["results"]] == [path for path, _ in expected]
    assert [row["score"] for row in answer.data["results"]] == pytest.approx([score for _, score in expected])
    assert [row["path"] for row in member_api.get(RECOMMENDATIONS.format(me) + "?n=1").data["results"]] == ["/y"]
    walk(me, "/y")  # the session moved on: /y is left out now, and weighs most
    assert [path for path, _ in recommendations.for_user(me)] == ["/x", "/z"]


def test_only_the_latest_pages_count(redis_client, monkeypatch):
    monkeypatch.setattr(recommendations, "RECENT_PAGES", 1)
    seed_around_a_and_b()
    walk("u", "/a", "/b")
    assert [path for path, _ in recommendations.for_user("u")] == ["/y", "/z"]  # /x follows /a only


def test_days_of_the_window_are_merged(redis_client, monkeypatch):
    seed("/a", {"/old": 5}, ts=clock.now() - 2 * DAY)
    seed("/a", {"/new": 1})
    walk("u", "/a")
    assert [path for path, _ in recommendations.for_user("u")] == ["/old", "/new"]
    monkeypatch.setattr(recommendations, "WINDOW_DAYS", 2)
    assert [path for path, _ in recommendations.for_user("u")] == ["/new"]


def test_no_live_session_is_200_with_no_results(staff_api, redis_client):
    seed_around_a_and_b()
    answer = staff_api.get(RECOMMENDATIONS.format("nobody"))
    assert (answer.status_code, answer.data) == (200, {"user": "nobody", "results": []})


def test_cached_for_the_session_one_round_trip_cached_three_computed(redis_client):
    seed_around_a_and_b()
    walk("u", "/a", "/b")
    recommendations.top_next(calendar.day_of(clock.now()), ["/a"])  # the script is loaded
    with probe(redis_client) as first:
        found = recommendations.for_user("u")
    with probe(redis_client) as again:
        assert recommendations.for_user("u", 2) == found[:2]
    # Computed: the session and the cache; a call a day of the window for both latest pages; the cache.
    assert (first.client_sends, first.commands["evalsha"]) == (3, recommendations.WINDOW_DAYS)
    assert first.commands["zrangebylex"] == 2 * recommendations.WINDOW_DAYS
    assert (again.client_sends, again.commands["evalsha"], again.commands["zrangebylex"]) == (1, 0, 0)
    cache = keys.recommendations("u")
    assert 0 < redis_client.pttl(cache) <= conf.settings.REPORT_TTL * 1000
    walk("u", "/z")
    with probe(redis_client) as moved:
        assert "/z" not in dict(recommendations.for_user("u"))
    assert moved.client_sends == 3


def test_rows_cached_for_one_session_are_never_served_for_the_next(redis_client):
    """The rows are cached under the fingerprint of the session they were computed from, so a
    session that moved, even between its read and the cache's write, gets rows computed for it."""
    seed_around_a_and_b()
    walk("u", "/a", "/b")
    before = recommendations.for_user("u")
    cached = redis_client.get(keys.recommendations("u"))
    walk("u", "/z")
    with probe(redis_client) as moved:
        after = recommendations.for_user("u")
    assert moved.commands["zrangebylex"] > 0  # computed again, not read from the cache
    assert "/z" in dict(before) and "/z" not in dict(after)
    assert redis_client.get(keys.recommendations("u")) not in (None, cached)  # cached for the new session


def test_a_session_that_moves_while_its_rows_are_computed_is_never_served_them(redis_client, monkeypatch):
    seed_around_a_and_b()
    walk("u", "/a", "/b")
    window_steps = recommendations.store.window_steps

    def moved_meanwhile(*args):
        found = window_steps(*args)
        walk("u", "/z")  # a page view between the session's read and the cache's write
        return found

    monkeypatch.setattr(recommendations.store, "window_steps", moved_meanwhile)
    assert "/z" in dict(recommendations.for_user("u"))  # the rows of the session as it was read
    monkeypatch.setattr(recommendations.store, "window_steps", window_steps)
    with probe(redis_client) as again:
        assert "/z" not in dict(recommendations.for_user("u"))
    assert again.commands["zrangebylex"] > 0  # computed for the session that moved, not the cache


# --- weighted random picks -----------------------------------------------------------------------

WEIGHTS = {"/a": 50, "/b": 30, "/c": 15, "/d": 5}
# Critical values of the chi-square distribution at p = 0.001 (tables): the statistic stays below
# them 999 times in 1,000 when the picks follow the weights. Seeded, so the run is deterministic.
CHI2_CRITICAL_P001 = {3: 16.266, 11: 31.264}


def chi_square(observed: Counter, expected: dict) -> float:
    return sum((observed[cell] - count) ** 2 / count for cell, count in expected.items())


def test_single_picks_follow_the_weights(redis_client):
    seed("/from", WEIGHTS)
    rng, draws = random.Random(19), 20_000
    picks = Counter(recommendations.next_pages("/from", 1, rng)[1][0] for _ in range(draws))
    total = sum(WEIGHTS.values())
    expected = {page: draws * weight / total for page, weight in WEIGHTS.items()}
    assert set(picks) == set(WEIGHTS)
    assert chi_square(picks, expected) < CHI2_CRITICAL_P001[len(WEIGHTS) - 1]


def test_distinct_picks_draw_from_the_mass_left(redis_client):
    seed("/from", WEIGHTS)
    rng, draws = random.Random(7), 5_000
    pairs = Counter(tuple(recommendations.next_pages("/from", 2, rng)[1]) for _ in range(draws))
    total = sum(WEIGHTS.values())
    # The second page is drawn among the others, in proportion to their weights.
    expected = {
        (first, second): draws * (w1 / total) * (w2 / (total - w1))
        for first, w1 in WEIGHTS.items()
        for second, w2 in WEIGHTS.items()
        if first != second
    }
    assert set(pairs) <= set(expected)
    assert chi_square(pairs, expected) < CHI2_CRITICAL_P001[len(expected) - 1]
    assert sorted(recommendations.next_pages("/from", 4)[1]) == sorted(WEIGHTS)
    assert sorted(recommendations.next_pages("/from", 50)[1]) == sorted(WEIGHTS)  # fewer followed


def test_picks_merge_the_window_and_the_copy_has_a_ttl(redis_client):
    seed("/from", {"/old": 1}, ts=clock.now() - DAY)
    seed("/from", {"/new": 1})
    path, picks, cache = recommendations.next_pages("/from", 5)
    assert (path, sorted(picks), cache) == ("/from", ["/new", "/old"], "miss")
    assert recommendations.next_pages("/from", 5)[2] == "hit"
    window = recommendations.window_name(recommendations.window_days(calendar.day_of(clock.now())))
    keep = (conf.settings.REPORT_TTL + reports.STALE_S) * 1000
    for key in (keys.transitions_cdf(window, "/from"), keys.transitions_total(window, "/from")):
        assert keep - 5000 < redis_client.pttl(key) <= keep


def test_a_hit_is_one_round_trip(redis_client):
    seed("/from", WEIGHTS)
    recommendations.next_pages("/from", 3)
    with probe(redis_client) as hit:
        assert len(recommendations.next_pages("/from", 3)[1]) == 3
    # No build: next_cdf.lua's ZRANGE (it reads the summed counts back) never ran.
    assert (hit.client_sends, hit.commands["evalsha"], hit.commands["zrange"]) == (1, 1, 0)


def test_stampede_of_50_cold_readers_builds_once(redis_client):
    seed("/from", WEIGHTS)
    with probe(redis_client) as counted_:
        answers = concurrently(50, lambda: recommendations.next_pages("/from", 2))
    assert counted_.commands["zrange"] == 1  # one build: next_cdf.lua reads its summed counts back once
    assert all(len(picks) == 2 for _, picks, _ in answers)
    assert {cache for _, _, cache in answers} <= {"miss", "hit"}


@override_settings(ACTIVITY_REPORT_TTL=1)
def test_expiry_under_50_readers_rebuilds_once_per_expiry_serving_stale_meanwhile(redis_client, monkeypatch):
    monkeypatch.setattr(reports, "STALE_S", 5)
    seed("/from", WEIGHTS)
    recommendations.next_pages("/from", 1)  # the copy that will go stale
    # Each build holds its lock 50 ms before it runs, so the readers meet builds in flight
    # (as in test_reports): on a busy machine none may come in a build's millisecond at all.
    monkeypatch.setattr(recommendations.store, "build_cdf", slowed(recommendations.store.build_cdf))
    caches: list[str] = []
    started = time.monotonic()

    def reader() -> None:
        while time.monotonic() - started < 2.5:
            caches.append(recommendations.next_pages("/from", 1)[2])
            time.sleep(0.02)

    with probe(redis_client) as counted_:
        concurrently(50, reader)
    elapsed = time.monotonic() - started
    assert "stale" in caches and "hit" in caches
    # Each build starts a new 1 s freshness window: at most one rebuild per second, one per miss (a
    # build is next_cdf.lua's one ZRANGE).
    assert 2 <= counted_.commands["zrange"] == caches.count("miss") <= int(elapsed) + 1


# --- the API: bad input, access, the document --------------------------------------------------------


@pytest.mark.parametrize("path", ["/nobody-went-on", "/admin/jsi18n/x"])  # the second is never a page view
def test_a_page_nothing_followed_is_404_and_writes_nothing(staff_api, redis_client, path):
    seed("/from", WEIGHTS)
    before = sorted(activity_keys(redis_client))
    answer = staff_api.get(f"{NEXT}?path={path}&n=1")
    assert answer.status_code == 404 and answer.json()["detail"]
    # A page nobody went on from is known only once Redis answers; that round trip also carried
    # the caller's own activity (last seen, active today), as every API request that reaches Redis.
    callers = ("{ls:", "{au}", "{vis:") if "nobody" in path else ()
    assert sorted(key for key in activity_keys(redis_client) if not key.startswith(callers, len(keys.prefix()))) == [
        key for key in before if not key.startswith(callers, len(keys.prefix()))
    ]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("", "path"),
        ("?path=", "path"),
        ("?path=/from&path=/from", "path"),
        (f"?path={'x' * 2049}", "path"),
        ("?path=/from&n=0", "n"),
        ("?path=/from&n=-1", "n"),
        ("?path=/from&n=51", "n"),
        ("?path=/from&n=01", "n"),
        ("?path=/from&n=x", "n"),
    ],
)
def test_next_pages_bad_input_is_400_naming_the_field_and_writes_nothing(staff_api, redis_client, query, field):
    seed("/from", WEIGHTS)
    before = sorted(activity_keys(redis_client))
    answer = staff_api.get(NEXT + query)
    assert answer.status_code == 400
    assert list(answer.data) == [field]
    assert sorted(activity_keys(redis_client)) == before


@pytest.mark.parametrize(("query", "field"), [("?n=0", "n"), ("?n=51", "n"), ("?n=", "n"), ("?n=1.5", "n")])
def test_recommendations_bad_n_is_400(staff_api, redis_client, query, field):
    answer = staff_api.get(RECOMMENDATIONS.format("42") + query)
    assert (answer.status_code, list(answer.data)) == (400, [field])


def test_unknown_path_raises_from_the_service(redis_client):
    with pytest.raises(UnknownPath, match="No page followed"):
        recommendations.next_pages("/nowhere", 1)


def test_next_pages_answer(staff_api, redis_client):
    seed("/from", WEIGHTS)
    answer = staff_api.get(NEXT + "?path=/from%3Futm%3Dx&n=3")  # the query string is dropped, as recorded
    assert answer.status_code == 200 and answer["X-Cache"] == "miss"
    assert answer.data["path"] == "/from"
    picks = [row["path"] for row in answer.data["results"]]
    assert len(set(picks)) == 3 and set(picks) <= set(WEIGHTS)
    assert len(staff_api.get(NEXT + "?path=/from").data["results"]) == 4  # default n = 5: every page


def test_who_may_read(member_api, staff_api, member, client, db, redis_client):
    seed("/from", WEIGHTS)
    mine, other = RECOMMENDATIONS.format(member.pk), RECOMMENDATIONS.format("someone-else")
    assert member_api.get(mine).status_code == 200
    assert staff_api.get(mine).status_code == 200
    assert member_api.get(other).status_code == 403
    assert client.get(mine).status_code == 401
    assert staff_api.get(NEXT + "?path=/from").status_code == 200
    assert member_api.get(NEXT + "?path=/from").status_code == 403
    assert client.get(NEXT + "?path=/from").status_code == 401


def test_the_openapi_document_describes_both_endpoints(client, db):
    document = client.get("/api/v1/schema/?format=json").json()
    recs = document["paths"]["/api/v1/users/{user}/recommendations/"]["get"]
    picks = document["paths"]["/api/v1/pages/next/"]["get"]
    for operation in (recs, picks):
        assert {"200", "400", "401", "403", "429", "503"} <= set(operation["responses"])
        n = next(p for p in operation["parameters"] if p["name"] == "n")
        assert (n["schema"]["minimum"], n["schema"]["maximum"]) == (1, 50)
    path = next(p for p in picks["parameters"] if p["name"] == "path")
    assert path["required"] and (path["schema"]["minLength"], path["schema"]["maxLength"]) == (1, 2048)
    assert "X-Cache" in picks["responses"]["200"]["headers"]


# --- the dashboard ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_dashboard_shows_where_people_went_next_from_the_top_pages(admin_client, redis_client):
    seed("/from", WEIGHTS)
    seed("/a", {"/x": 2})
    html = admin_client.get("/admin/activity/dashboard/").content.decode()
    table = re.search(r'id="activity-where-next".*?</table>', html, re.S).group(0)
    rows = dict(re.findall(r"<tr><td>([^<]+)</td><td>([^<]*)</td></tr>", table))
    assert rows["/from"] == "/a (50), /b (30), /c (15)"  # the top three, most frequent first
    assert rows["/a"] == "/x (2)"
    assert rows["/d"] == "-"


def test_transitions_counted_at_midnight_go_to_the_day_of_the_view(redis_client, monkeypatch):
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0).timestamp()
    monkeypatch.setattr(clock, "now", lambda: midnight + 1)  # both views within the session window
    walk("u", "/a", ts=midnight - 0.5)
    walk("u", "/b", ts=midnight)
    assert counted("/a") == {"/b": 1}
    assert counted("/a", calendar.day_name(calendar.day_of(midnight - 1))) == {}


def test_threads_counting_the_same_step_lose_nothing(redis_client):
    def burst(t: int) -> None:
        ts = clock.now()
        for n in range(50):  # each thread's views in time order: /a, /b, then another page
            walk(f"t{t}", "/a", "/b", ts=ts)
            ingest.record_events([Event(f"t{t}", ts + 0.002, f"/other/{n}")])
            ts += 0.003

    threads = [threading.Thread(target=burst, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counted("/a") == {"/b": 400}
