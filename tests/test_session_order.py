"""Time order is time order: a session lists its views by ``ts`` however late they arrive, a
transition is counted between neighbours by ``ts`` on the later view's day, and a view older than
the session window counts in its day's statistics only. The property test shuffles arrival order
and checks the session and the transitions against the sorted history."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from itertools import pairwise

from django.test import override_settings
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from activity import calendar, clock, conf
from activity.events import Event
from activity.services import ingest, last_seen, sessions
from activity.store import keys
from tests.conftest import delete_own_keys
from tests.redis_probe import probe
from tests.test_events_property import REPEATABLE
from tests.test_recommendations import counted

DAY = 86400
MIDNIGHT = datetime(2026, 11, 26, tzinfo=UTC).timestamp()


def stop_clock(monkeypatch, now: float) -> float:
    """Stop the clock at ``now``."""
    monkeypatch.setattr(clock, "now", lambda: now)
    return now


def day(ts: float) -> str:
    return calendar.day_name(calendar.day_of(ts))


def record(user: str, path: str, ts: float) -> None:
    ingest.record_events([Event(user, ts, path)])


def pages(user: str) -> list[str]:
    """The user's session, oldest first."""
    return [path for path, _ in reversed(sessions.current(user))]


def steps(redis_client, name: str) -> dict[tuple[str, str], int]:
    """Every step of the day with its count; the index holds exactly the same members."""
    rows = redis_client.zrange(keys.transitions(name), 0, -1, withscores=True)
    assert set(redis_client.zrange(keys.transitions_index(name), 0, -1)) == {member for member, _ in rows}
    assert all(count >= 1 and count == int(count) for _, count in rows)
    return {tuple(member.split("\0", 1)): int(count) for member, count in rows}


# --- the example ---------------------------------------------------------------------------


def test_a_view_backdated_two_days_stays_out_of_the_session_and_its_transitions(staff_api, redis_client):
    now = clock.now()
    old = now - 2 * DAY
    for ts, path in ((now, "/new"), (old, "/older-by-2-days")):
        answer = staff_api.post("/api/v1/events/", {"events": [{"user": "42", "ts": ts, "path": path}]}, format="json")
        assert answer.status_code == 202
    session = staff_api.get("/api/v1/users/42/session/")
    assert [row["path"] for row in session.data["results"]] == ["/new"]
    assert staff_api.get("/api/v1/pages/next/?path=/new").status_code == 404  # no page followed /new
    assert redis_client.zcard(keys.transitions(day(now))) == 0
    # What a late view still updates: its own day's statistics; last seen never moves back.
    then = calendar.day_of(old)
    assert (sessions.page_views(then), sessions.started(then)) == (1, 0)
    assert sessions.top_paths(then) == [("/older-by-2-days", 1)]
    assert redis_client.hget(keys.viewer("42"), calendar.period_name("day", then)) == "1"
    assert last_seen.get("42").ts == round(now, 3)


def test_a_view_just_older_than_the_window_stays_out_but_one_within_joins(redis_client, monkeypatch):
    now = stop_clock(monkeypatch, round(clock.now(), 3))  # whole milliseconds, as ingest records a ts
    window = conf.settings.SESSION_WINDOW
    assert ingest.record_events([Event("u", now - window - 0.001, "/too-old")]).sessions_started == 0
    assert sessions.page("u") is None
    assert sessions.page_views(calendar.day_of(now - window)) == 1
    record("u", "/now", now)
    assert ingest.record_events([Event("u", now - window, "/just-in")]).sessions_started == 0
    assert pages("u") == ["/just-in", "/now"]
    assert counted("/just-in", day(now)) == {"/now": 1}


# --- late views within the window ------------------------------------------------------------------


def test_a_late_view_goes_to_its_place_and_splits_the_step_it_falls_in(redis_client, monkeypatch):
    now = stop_clock(monkeypatch, clock.now())
    record("u", "/a", now - 30)
    record("u", "/c", now - 10)
    assert counted("/a", day(now)) == {"/c": 1}
    with probe(redis_client) as sent:
        record("u", "/b", now - 20)
    assert sent.client_sends == 1  # still one round trip
    assert pages("u") == ["/a", "/b", "/c"]
    assert [ts for _, ts in sessions.current("u")] == [round(now - 10, 3), round(now - 20, 3), round(now - 30, 3)]
    assert steps(redis_client, day(now)) == {("/a", "/b"): 1, ("/b", "/c"): 1}  # /a -> /c taken back
    record("u", "/a", now - 25)  # a reload of /a, late: /a -> /b becomes /a -> /a (no step), /a -> /b
    assert pages("u") == ["/a", "/a", "/b", "/c"]
    assert steps(redis_client, day(now)) == {("/a", "/b"): 1, ("/b", "/c"): 1}
    record("u", "/z", now - 40)  # before every entry: /z -> /a
    assert pages("u") == ["/z", "/a", "/a", "/b", "/c"]
    assert steps(redis_client, day(now)) == {("/z", "/a"): 1, ("/a", "/b"): 1, ("/b", "/c"): 1}


def test_a_step_taken_back_is_never_created_nor_made_negative(redis_client, monkeypatch):
    now = stop_clock(monkeypatch, clock.now())
    with override_settings(ACTIVITY_TRANSITIONS=False):
        record("u", "/a", now - 30)
        record("u", "/c", now - 10)  # /a -> /c never counted
    record("v", "/x", now - 5)
    record("v", "/y", now)  # the day's sets exist
    record("u", "/b", now - 20)
    assert steps(redis_client, day(now)) == {("/a", "/b"): 1, ("/b", "/c"): 1, ("/x", "/y"): 1}
    # Counted twice, taken back once.
    record("w", "/a", now - 30)
    record("w", "/c", now - 10)
    record("w2", "/a", now - 30)
    record("w2", "/c", now - 10)
    record("w", "/b", now - 20)
    assert steps(redis_client, day(now))[("/a", "/c")] == 1


def test_late_steps_across_midnight_go_to_the_later_views_day(redis_client, monkeypatch):
    stop_clock(monkeypatch, MIDNIGHT + 10)
    yesterday, today = day(MIDNIGHT - 1), day(MIDNIGHT)
    record("u", "/a", MIDNIGHT - 30)
    record("u", "/c", MIDNIGHT + 5)
    assert (steps(redis_client, yesterday), steps(redis_client, today)) == ({}, {("/a", "/c"): 1})
    with probe(redis_client) as sent:
        record("u", "/b", MIDNIGHT - 5)
    assert sent.client_sends == 1
    assert pages("u") == ["/a", "/b", "/c"]
    assert steps(redis_client, yesterday) == {("/a", "/b"): 1}
    assert steps(redis_client, today) == {("/b", "/c"): 1}
    for name in (yesterday, today):
        assert redis_client.ttl(keys.transitions(name)) > 0
    assert sessions.started(calendar.day_of(MIDNIGHT - 1)) == 1  # on the first view's own day


@override_settings(ACTIVITY_SESSION_MAX_PAGES=3)
def test_a_full_session_keeps_the_newest_by_ts_and_skips_a_view_older_than_all(redis_client, monkeypatch):
    now = stop_clock(monkeypatch, clock.now())
    for n in (1, 2, 3):
        record("u", f"/p{n}", now - 40 + n)
    record("u", "/older", now - 40)  # older than every page kept: the newest three do not include it
    assert pages("u") == ["/p1", "/p2", "/p3"]
    assert steps(redis_client, day(now)) == {("/p1", "/p2"): 1, ("/p2", "/p3"): 1}
    record("u", "/late", now - 37.5)  # between /p2 and /p3; /p1 is then the oldest of four and goes
    assert pages("u") == ["/p2", "/late", "/p3"]
    assert steps(redis_client, day(now)) == {("/p1", "/p2"): 1, ("/p2", "/late"): 1, ("/late", "/p3"): 1}


def test_a_late_view_renews_the_session_and_a_batch_in_any_order_is_sorted(redis_client, monkeypatch):
    now = stop_clock(monkeypatch, clock.now())
    ingest.record_events([Event("u", now - n, f"/p{n}") for n in range(5)])  # newest first
    assert pages("u") == ["/p4", "/p3", "/p2", "/p1", "/p0"]
    assert redis_client.pttl(keys.session("u")) > (conf.settings.SESSION_WINDOW - 5) * 1000
    assert counted("/p4", day(now)) == {"/p3": 1}
    assert sessions.started(calendar.day_of(now)) == 1


# --- the property: arrival order does not matter ------------------------------------------------------

PAGES = ["/a", "/b", "/c", "/d"]
MIDDAY = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()
USERS = ("u0", "u1")
# A user's views: a page and a distinct offset in ms into the 59 seconds before now.
history = st.lists(
    st.tuples(st.sampled_from(PAGES), st.integers(0, 59_000)), min_size=1, max_size=9, unique_by=lambda view: view[1]
)


@st.composite
def arrivals(draw) -> tuple[dict[str, list[tuple[str, int]]], list[list[tuple[str, str, int]]]]:
    """Each user's history, and the views of all of them in a shuffled order cut into batches."""
    histories = {user: draw(history) for user in USERS}
    views = draw(st.permutations([(user, page, offset) for user, views in histories.items() for page, offset in views]))
    cuts = sorted(draw(st.sets(st.integers(1, len(views) - 1), max_size=4)) if len(views) > 1 else set())
    return histories, [views[start:end] for start, end in zip([0, *cuts], [*cuts, len(views)], strict=True)]


@hypothesis_settings(REPEATABLE, max_examples=150)
@given(arrivals(), st.sampled_from([MIDDAY, MIDNIGHT + 20]), st.sampled_from([4, 50]))
def test_sessions_and_transitions_match_the_sorted_history_whatever_the_arrival_order(
    redis_client, monkeypatch, scenario, now, max_pages
):
    delete_own_keys(redis_client)
    stop_clock(monkeypatch, now)
    histories, batches = scenario

    def ts(offset: int) -> float:
        return round(now - 59 + offset / 1000, 3)

    with override_settings(ACTIVITY_SESSION_MAX_PAGES=max_pages):
        started = sum(
            ingest.record_events([Event(user, ts(offset), page) for user, page, offset in batch]).sessions_started
            for batch in batches
        )
        expected_steps: Counter[tuple[str, str, str]] = Counter()
        for user, views in histories.items():
            ordered = [(page, ts(offset)) for page, offset in sorted(views, key=lambda view: view[1])]
            assert sessions.current(user) == ordered[::-1][:max_pages]  # most recent first, the newest N
            for (before, _), (after, when) in pairwise(ordered):
                if before != after:
                    expected_steps[(day(when), before, after)] += 1
    assert started == len(USERS)
    found = {
        (name, before, after): count
        for name in {day(now - 60), day(now)}
        for (before, after), count in steps(redis_client, name).items()
    }
    if all(len(views) <= max_pages for views in histories.values()):  # nothing trimmed from a session
        assert found == dict(expected_steps)
    by_day = Counter(calendar.day_of(ts(offset)) for views in histories.values() for _, offset in views)
    assert {when: sessions.page_views(when) for when in by_day} == dict(by_day)
