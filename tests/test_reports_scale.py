"""Reports at scale: no command sorts every viewer, yet the rows equal a full sort.

The page-view script keeps each period's top viewers, at most ``store.sessions.CANDIDATES`` of
them, and the ranked report SORTs only their top K; the by-name report is read from the index the
page-view script keeps. Both are compared with the full-SORT shapes the service used before
(``SORT <every viewer> BY ... GET ...``) on random data with many ties, after every batch, and what
a view and a rebuild cost is counted.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from django.test import override_settings

from activity import calendar, clock, conf
from activity.events import Event
from activity.services import ingest, reports
from activity.store import keys, lifetimes
from activity.store import sessions as sessions_store
from activity.store.client import get_client, is_cluster
from activity.store.sessions import PageView, queue_record
from tests.redis_counts import CommandDelta
from tests.redis_probe import probe
from tests.test_sessions import assert_every_key_has_a_ttl

WEDNESDAY = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()  # ISO week 2026W48 began on Monday 23rd
DAY_S = 86400


@pytest.fixture
def wednesday(monkeypatch):
    """The clock at noon on a Wednesday, so views of Monday and Tuesday count for the week only."""
    monkeypatch.setattr(clock, "now", lambda: WEDNESDAY)


def random_views(seed: int, users: int, max_views: int = 6) -> tuple[list[Event], dict[str, str]]:
    """``users`` users with 1..max_views views each (many ties), spread over Monday to Wednesday
    and shuffled, so users climb past each other; random names (some shared, some unknown: the id
    stands in)."""
    rng = random.Random(seed)
    events, names = [], {}
    for n in range(users):
        user = f"{rng.choice('abcxyz')}{n}"
        name = rng.choice([None, f"n{rng.randint(0, users // 4)}", f"N{rng.randint(0, 9)}", f"{n:04d}"])
        if name is not None:
            names[user] = name
        events += [
            Event(user, clock.now() - rng.randrange(3) * DAY_S, f"/p{i}") for i in range(rng.randint(1, max_views))
        ]
    rng.shuffle(events)
    return events, names


def batches(events: list[Event], size: int) -> list[list[Event]]:
    return [events[start : start + size] for start in range(0, len(events), size)]


def record(events: list[Event], names: dict[str, str]) -> None:
    """Record ``events`` through the service, with the usernames known for them."""
    ingest.record_events(events, names={e.user: names[e.user] for e in events if e.user in names})


def period_key(period: str = "day", now: float | None = None) -> str:
    return calendar.period_name(period, calendar.day_of(clock.now() if now is None else now))


def in_period(event: Event, period: str) -> bool:
    return period_key(period, event.ts) == period_key(period)


class EveryViewer:
    """What the page-view script kept before the top viewers were capped: a set of every viewer of
    the period (here the test's own key, in the {pv} slot as it was), for the full SORT the reports
    must equal."""

    def __init__(self, redis_client, period: str) -> None:
        self.client, self.period = redis_client, period
        self.key = f"{keys.prefix()}{keys.PV_TAG}:test-viewers:{period_key(period)}"

    def add(self, events: list[Event]) -> None:
        users = {event.user for event in events if in_period(event, self.period)}
        if users:
            self.client.sadd(self.key, *users)
            self.client.expire(self.key, 600)

    def sort(
        self, by: str, desc: bool = False, alpha: bool = False, start: int = 0, num: int | None = None
    ) -> list[str]:
        pkey = period_key(self.period)
        patterns = ["#", keys.viewer_pattern(keys.VIEWER_NAME), keys.viewer_pattern(pkey)]
        if not is_cluster(self.client):
            limit = {} if num is None else {"start": start, "num": num}
            return self.client.sort(self.key, by=by, get=patterns, desc=desc, alpha=alpha, **limit)
        # A cluster refuses SORT's BY and GET patterns: the same sort, done here as sort.c does it
        # (the weight, then the element byte by byte; DESC reverses both; a missing GET is '').
        rows = []
        for user in self.client.smembers(self.key):
            name = self.client.hget(keys.viewer(user), keys.VIEWER_NAME) or ""
            views = self.client.hget(keys.viewer(user), pkey) or ""
            rows.append((user, name, views))
        column = 1 if by == keys.viewer_pattern(keys.VIEWER_NAME) else 2
        rows.sort(key=lambda row: (row[column] if alpha else float(row[column] or 0), row[0].encode()), reverse=desc)
        chosen = rows[start : None if num is None else start + num]
        return [value for row in chosen for value in row]

    def most_active(self, top: int) -> list[str]:
        """``SORT viewers BY uv:* DESC LIMIT 0 top GET # GET name:* GET uv:*``: the old report."""
        return self.sort(by=keys.viewer_pattern(period_key(self.period)), desc=True, start=0, num=top)


def all_rows(name: str, period: str = "day", size: int = 37) -> list[dict]:
    """Every row of a report, page by page, each page served from a current copy or index."""
    rows, number = [], 1
    while True:
        found, cache = reports.page(name, period, number, size)
        assert cache != "stale", (name, period, number)
        rows += found.rows
        if number * size >= found.count:
            return rows
        number += 1


def flat(rows: list[dict]) -> list[str]:
    return [value for row in rows for value in (row["user"], row["name"], str(row["views"]))]


def top_viewers(redis_client, period: str) -> list[tuple[str, int]]:
    """The period's candidates as stored, most first."""
    members = redis_client.zrange(keys.top_viewers(period_key(period)), 0, -1, desc=True, withscores=True)
    return [(user, int(score)) for user, score in members]


def true_top(counts: Counter, cap: int) -> list[tuple[str, int]]:
    """The ``cap`` users with the most views, ties to the greater id byte by byte (SORT ... DESC)."""
    ranked = sorted(counts.items(), key=lambda item: (item[1], item[0].encode()), reverse=True)
    return ranked[:cap]


# --- the ranked report equals a full sort, at every moment ------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("period", ["day", "week"])
def test_candidates_are_the_true_top_and_most_active_equals_the_full_sort_after_every_batch(
    redis_client, wednesday, seed, period, monkeypatch
):
    """Counts 1-6 over 150 users give ties at the 5th place and at the 8th (the cap) all the time;
    users climb past each other batch after batch, entering and leaving the candidates."""
    monkeypatch.setattr(reports, "TOP", 5)
    monkeypatch.setattr(sessions_store, "CANDIDATES", 8)
    events, names = random_views(seed, 150)
    viewers = EveryViewer(redis_client, period)
    counts: Counter = Counter()
    sizes, seen = [], Counter()
    before: dict[str, int] = {}
    for part in batches(events, 15):
        record(part, names)
        viewers.add(part)
        counts.update(event.user for event in part if in_period(event, period))
        stored = top_viewers(redis_client, period)
        sizes.append(len(stored))
        assert stored == true_top(counts, 8)
        assert reports.rebuild("most-active", period) == "built"
        assert flat(all_rows("most-active", period)) == viewers.most_active(5)
        ranked = true_top(counts, 9)
        seen["tie at the 5th"] += len(ranked) > 5 and ranked[4][1] == ranked[5][1]
        seen["tie at the cap"] += len(ranked) > 8 and ranked[7][1] == ranked[8][1]
        now = dict(stored)
        left = {counts[user] for user in before.keys() - now.keys()}
        seen["left"] += len(left)
        seen["entered on a tie with one that left"] += any(now[user] in left for user in now.keys() - before.keys())
        before = now
    assert max(sizes) == 8  # full, never past the cap
    assert min(seen.values()) >= 2, seen  # the comparison met each case more than once


def test_a_tie_at_the_cap_is_settled_as_sort_settles_it(redis_client, monkeypatch):
    """SORT ... DESC puts equal counts in descending byte order of the user id (Redis sort.c compares
    the elements when the weights are equal), so a viewer reaching the cap-th count enters exactly
    when its id is greater, and the cap-th leaves."""
    monkeypatch.setattr(reports, "TOP", 2)
    monkeypatch.setattr(sessions_store, "CANDIDATES", 3)
    now = clock.now()
    viewers = EveryViewer(redis_client, "day")

    def views(*users: str) -> None:
        events = [Event(user, now, "/") for user in users]
        ingest.record_events(events)
        viewers.add(events)

    views("b", "b", "c", "c", "d", "d")
    assert top_viewers(redis_client, "day") == [("d", 2), ("c", 2), ("b", 2)]
    views("e", "e")  # ties with the cap-th ("b", 2), greater id: in, "b" out
    assert top_viewers(redis_client, "day") == [("e", 2), ("d", 2), ("c", 2)]
    views("a", "a", "10", "10")  # ties too, smaller ids ("10" < "c" byte by byte): stay out
    assert top_viewers(redis_client, "day") == [("e", 2), ("d", 2), ("c", 2)]
    views("b")  # back past everyone
    assert top_viewers(redis_client, "day") == [("b", 3), ("e", 2), ("d", 2)]
    assert flat(all_rows("most-active")) == viewers.most_active(2) == ["b", "b", "3", "e", "e", "2"]
    assert viewers.sort(by=keys.viewer_pattern(period_key()), desc=True)[::3] == ["b", "e", "d", "c", "a", "10"]


# --- the by-name report ------------------------------------------------------------------------------


def pending_of(period: str) -> str:
    return keys.viewers_by_name_pending(period_key(period))


def pending_count(redis_client, period: str) -> int:
    """Entries in the period's pending set: its members less the marker (the empty string)."""
    return len(redis_client.smembers(pending_of(period)) - {""})


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_active_by_name_equals_the_full_sort_on_random_data(redis_client, wednesday, seed, monkeypatch):
    """300 new viewers wait in the pending set; a read merges one slice (40) and says ``stale``,
    each refresh run merges at most two slices a period, and once none is pending the report is
    ``hit`` and equals the full sort."""
    monkeypatch.setattr(reports, "MERGE_SLICE", 40)
    monkeypatch.setattr(reports, "MERGE_SLICES_PER_RUN", 2)
    events, names = random_views(seed, 300)
    viewers = EveryViewer(redis_client, "week")
    viewers.add(events)
    record(events, names)
    assert pending_count(redis_client, "week") == 300 and not redis_client.exists(keys.viewers_by_name("week"))
    found, cache = reports.page("active-by-name", "week")
    assert (cache, found.count, found.expires_in, pending_count(redis_client, "week")) == ("stale", 40, 0, 260)
    left = 260
    while left:
        reports.refresh()
        left = max(left - 2 * 40, 0)
        assert pending_count(redis_client, "week") == left  # two slices a run, no more
    counts = Counter(event.user for event in events)
    rows = all_rows("active-by-name", "week")
    # SORT ALPHA leaves the order of equal names undefined; the index breaks ties by user id.
    expected = sorted(
        ((user, names.get(user, user), views) for user, views in counts.items()),
        key=lambda r: (r[1].encode(), r[0].encode()),
    )
    assert [(row["user"], row["name"], row["views"]) for row in rows] == expected
    full = viewers.sort(by=keys.viewer_pattern(keys.VIEWER_NAME), alpha=True)
    assert [row["name"] for row in rows] == full[1::3]  # the same names in the same order
    assert sorted((row["user"], row["name"], str(row["views"])) for row in rows) == sorted(
        zip(full[0::3], full[1::3], full[2::3], strict=True)
    )


def test_reads_alone_merge_a_backlog_one_slice_each(redis_client, wednesday, monkeypatch):
    monkeypatch.setattr(reports, "MERGE_SLICE", 7)
    events, names = random_views(11, 50)
    record(events, names)
    caches = [reports.page("active-by-name", "week", 1, 5)[1] for _ in range(8)]
    assert caches == ["stale"] * 7 + ["hit"]  # 50 pending: 7 reads of 7 leave 1, the 8th merges it
    assert redis_client.zcard(keys.viewers_by_name(period_key("week"))) == 50
    assert not redis_client.exists(pending_of("week"))


def test_a_new_username_moves_the_user_in_the_by_name_index(redis_client):
    now = clock.now()
    ingest.record_events([Event("7", now, "/a")], names={"7": "zed"})
    ingest.record_events([Event("8", now, "/a")])
    ingest.record_events([Event("7", now, "/b")], names={"7": "amy"})
    ingest.record_events([Event("7", now, "/c")])  # no name known this time: the last one stays
    rows = all_rows("active-by-name")
    assert [(row["user"], row["name"], row["views"]) for row in rows] == [("8", "8", 1), ("7", "amy", 3)]
    assert redis_client.zcard(keys.viewers_by_name(period_key())) == 2


@pytest.mark.parametrize("merged", [False, True], ids=["old entry pending", "old entry merged"])
def test_a_rename_leaves_exactly_one_entry_wherever_the_old_one_was(redis_client, merged):
    now = clock.now()
    ingest.record_events([Event("7", now, "/a")], names={"7": "zed"})
    ingest.record_events([Event("8", now, "/a")])
    if merged:
        reports.refresh()
    for period in ("day", "week"):
        where = keys.viewers_by_name(period_key(period)) if merged else pending_of(period)
        assert "zed\x007" in (redis_client.zrange(where, 0, -1) if merged else redis_client.smembers(where))
    ingest.record_events([Event("7", now, "/b")], names={"7": "amy"})
    for period in ("day", "week"):
        index, pending = keys.viewers_by_name(period_key(period)), pending_of(period)
        entries = redis_client.zrange(index, 0, -1) + sorted(redis_client.smembers(pending))
        assert [entry for entry in entries if entry.endswith("\x007")] == ["amy\x007"]
        rows = all_rows("active-by-name", period)
        assert [(row["user"], row["name"], row["views"]) for row in rows] == [("8", "8", 1), ("7", "amy", 2)]
        assert redis_client.zrange(index, 0, -1) == ["8\x008", "amy\x007"] and not redis_client.exists(pending)


def test_by_name_pages_are_two_round_trips_and_never_sort(redis_client, wednesday):
    events, names = random_views(8, 200)
    record(events, names)
    reports.refresh()  # the 200 new viewers merged (the script is loaded too)
    with probe(redis_client) as seen:
        found, cache = reports.page("active-by-name", "week", 3, 20)
    assert cache == "hit" and found.count == 200 and len(found.rows) == 20
    # The script names the page's users, then one pipeline reads their counts (declared keys only).
    assert (seen.client_sends, seen.server_reads) == (2, 2)
    # One page of the index, an HGET of each of the page's counts: no ZSCORE, nothing of every viewer;
    # the merge found nothing pending (an SPOP, the sizes), so no ZADD.
    assert seen.commands["sort"] == 0 and seen.commands["zrange"] == 1 and seen.commands["hget"] == 20
    assert seen.commands["zscore"] == 0 and seen.commands["spop"] == 1 and seen.commands["zadd"] == 0
    record([Event(f"new{n}", clock.now(), "/") for n in range(20)], {})
    with probe(redis_client) as seen:
        found, cache = reports.page("active-by-name", "week", 1, 20)
    assert cache == "hit" and found.count == 220  # 20 pending, fewer than a slice: all merged by this read
    assert (seen.client_sends, seen.server_reads) == (2, 2)
    assert seen.commands["spop"] == 1 and seen.commands["zadd"] == 1 and seen.commands["expire"] == 1


# --- expiry --------------------------------------------------------------------------------------


def expire_times(redis_client, pattern: str) -> dict[str, int]:
    """PEXPIRETIME (absolute, ms) of every key matching ``pattern`` under the prefix."""
    found = list(redis_client.scan_iter(match=f"{keys.prefix()}{pattern}", count=1000))
    return dict(zip(found, (redis_client.execute_command("PEXPIRETIME", key) for key in found), strict=True))


@pytest.mark.parametrize("period", ["day", "week"])
def test_a_periods_lists_outlive_its_counters_and_come_back_with_a_ttl_after_expiry(
    redis_client, wednesday, period, monkeypatch
):
    """A user's views hash gets the week's TTL at each of their views, the candidates theirs when a
    user enters them, the by-name index when a merge moves entries into it. The period's pending
    by-name set gets the period's TTL when its first entry makes it, so it lives that long from then.
    Once a period's keys have expired, a late view starts them again, each with a TTL, and the
    reports agree with the counters again."""
    monkeypatch.setattr(reports, "TOP", 5)
    monkeypatch.setattr(sessions_store, "CANDIDATES", 8)
    events, names = random_views(9, 120)
    pkey = period_key(period)
    index, pending = keys.viewers_by_name(pkey), pending_of(period)
    ttl_ms = lifetimes.page_stats_ttl(conf.settings.PAGE_STATS_DAYS, weekly=period == "week") * 1000
    week_ms = lifetimes.page_stats_ttl(conf.settings.PAGE_STATS_DAYS, weekly=True) * 1000
    for part in batches(events, 20):
        made = int(time.time() * 1000) - 1  # the pending set, when the batch brings a new viewer
        record(part, names)
        hashes = expire_times(redis_client, f"{keys.PV_TAG}:viewer:*")
        assert min(hashes[keys.viewer(event.user)] for event in part) >= made + week_ms
        lists = expire_times(redis_client, f"{keys.PV_TAG}:*:{pkey}")
        assert lists[keys.top_viewers(pkey)] > 0
        if pending in lists:  # the batch brought new viewers of the period
            assert lists[pending] >= made + ttl_ms
        if pending in lists:
            merged = int(time.time() * 1000) - 1  # the index, when this read merges the new viewers
        assert reports.page("active-by-name", period)[1] == "hit"  # merged: fewer than a slice were new
        lists = expire_times(redis_client, f"{keys.PV_TAG}:*:{pkey}")
        assert lists.keys() == {keys.top_viewers(pkey), index} and lists[index] >= merged + ttl_ms
    assert_every_key_has_a_ttl(redis_client)

    # The period's keys expire (their TTLs run out, the latest ones last); late views come in.
    for key in redis_client.scan_iter(match=f"{keys.prefix()}{keys.PV_TAG}:*{period_key(period)}*"):
        redis_client.pexpire(key, 1)
    for key in redis_client.scan_iter(match=f"{keys.prefix()}{keys.PV_TAG}:viewer:*"):
        redis_client.hdel(key, pkey)  # the period's counts, as a later day's first view prunes them
    time.sleep(0.01)
    late, names = random_views(10, 40)
    viewers = EveryViewer(redis_client, period)
    redis_client.delete(viewers.key)
    viewers.add(late)
    for part in batches(late, 7):
        record(part, names)
    assert_every_key_has_a_ttl(redis_client)
    assert redis_client.ttl(pending) > 0 and not redis_client.exists(index)
    assert top_viewers(redis_client, period) == true_top(Counter(e.user for e in late if in_period(e, period)), 8)
    reports.rebuild("most-active", period)
    assert flat(all_rows("most-active", period)) == viewers.most_active(5)
    names_now = viewers.sort(by=keys.viewer_pattern(keys.VIEWER_NAME), alpha=True)[1::3]
    reports.refresh()  # more new viewers than one read merges
    assert [row["name"] for row in all_rows("active-by-name", period)] == names_now
    assert redis_client.ttl(index) > 0
    assert_every_key_has_a_ttl(redis_client)

    # The candidates alone gone (evicted, deleted by hand): the next view that may enter them makes
    # them again, with a TTL (the week's: one at or above the day's bar, as the week's busiest is).
    redis_client.delete(keys.top_viewers(period_key(period)))
    busiest = true_top(Counter(e.user for e in late if in_period(e, "week")), 1)[0][0]
    ingest.record_events([Event(busiest, clock.now(), "/again")])
    assert redis_client.ttl(keys.top_viewers(period_key(period))) > 0
    assert_every_key_has_a_ttl(redis_client)


# --- what a view and a rebuild cost --------------------------------------------------------------


def script_commands(redis_client, *views: PageView) -> Counter:
    """The commands the page-view scripts run for a batch of ``views`` (INFO commandstats counts the
    scripts' own calls), without anything else ``record_events`` sends."""
    settings = conf.settings
    pipe = get_client().pipeline(transaction=False)
    queue_record(
        pipe, views, settings.SESSION_WINDOW, settings.SESSION_MAX_PAGES, settings.PAGE_STATS_DAYS, clock.now()
    )
    with CommandDelta(redis_client) as delta:
        pipe.execute()
    return delta.calls


# A view's commands besides the report structures: LINDEX of the session's last entry (its ts tells
# an append from a late view's insert), RPUSH and PEXPIRE of the session (RPUSH answers the length:
# an LTRIM only past the pages kept); HGET of the name in the user's views hash (no username: the one
# stored stands) and the hash's EXPIRE; INCRBY of the day's views and ZINCRBY of a known path (their
# TTLs were set when the key or the path was new); each of the three scripts' EVALSHA and EXISTS of
# the tombstones (an erased user's views are skipped).
SHARED = Counter(evalsha=3, exists=3, lindex=1, rpush=1, pexpire=1, incrby=1, zincrby=1)


@override_settings(ACTIVITY_TRANSITIONS=False, ACTIVITY_REDIS_TIMEOUT=10.0)
@pytest.mark.parametrize("users", [50, 2000])
def test_a_view_costs_the_same_commands_whatever_the_number_of_viewers(redis_client, users, monkeypatch):
    monkeypatch.setattr(sessions_store, "CANDIDATES", 8)
    monkeypatch.setattr(reports, "TOP", 5)
    now = round(clock.now(), 3)  # as ingest records it: each view below is the session's newest
    heavy = [f"h{n}" for n in range(8)]  # the candidates: 10 views each
    events = [Event(f"u{n}", now, "/") for n in range(users) for _ in range(3)]
    events += [Event(user, now, "/") for user in heavy for _ in range(10)] + [Event("z9", now, "/")] * 9
    for part in batches(events, 500):
        record(part, {})
    assert redis_client.zcard(keys.top_viewers(period_key())) == 8
    counts = {
        # A returning viewer below the bar, without a username (an API event): its counters' INCRs
        # and the day's bar, nothing more.
        "returning": script_commands(redis_client, PageView("u1", "/", now)),
        # The same with its username (the middleware's view), unchanged: the stored name read too.
        "returning, named": script_commands(redis_client, PageView("u3", "/", now, "u3")),
        # A candidate: its new count as its score in both periods.
        "candidate": script_commands(redis_client, PageView("h3", "/", now)),
        # A first view of the period: the counters' and lists' TTLs, the by-name entries.
        "new viewer": script_commands(redis_client, PageView("n1", "/", now)),
        # Reaching the cap-th count (10) with a greater id than the cap-th ("h0"): in, "h0" out.
        "entering": script_commands(redis_client, PageView("z9", "/", now)),
        # A new username ("u2" stood in until now): the old entries out of both indexes and both
        # pending sets, the new ones into the pending sets, the old name a field of the views hash.
        "renamed": script_commands(redis_client, PageView("u2", "/", now, "Ursula")),
    }
    reports.refresh()  # every pending entry merged: the pending sets are gone, marker and all
    assert not redis_client.exists(pending_of("day"), pending_of("week"))
    # The first view after it makes the pending sets again, each with its TTL.
    counts["new viewer, sets new"] = script_commands(redis_client, PageView("n2", "/", now))
    # The day's and the week's HINCRBY, and the bars of the day's and the week's candidates (a ZRANGE
    # each, once per call).
    below = Counter(hincrby=2, zrange=2)
    assert counts["returning"] == SHARED + below
    assert counts["returning, named"] == SHARED + below + Counter(hget=1)
    assert counts["candidate"] == SHARED + below + Counter(zadd=2)
    # A new session too: INCRBY of the day's sessions started. The name set in the new hash, whose
    # fields are looked over and TTL renewed once a day (HKEYS: none past the statistics' days), and
    # the by-name entries into the pending sets (the marker's SADD, then the call's entries' in one),
    # not into the million-member indexes; the sets hold the marker, so their TTLs stand. Below the
    # bar, it leaves the top viewers and their TTL alone.
    assert counts["new viewer"] == SHARED + below + Counter(incrby=1, hget=1, hset=1, hkeys=1, expire=1, sadd=4)
    assert counts["new viewer, sets new"] == counts["new viewer"] + Counter(expire=2)
    assert counts["entering"] == SHARED + below + Counter(zadd=2, zremrangebyrank=2, expire=2)
    # A rename: one HSET of the new name and the old one's field, the old entries out (ZREM, SREM),
    # the new ones pended; the pending sets keep their marker and their TTLs.
    assert counts["renamed"] == SHARED + below + Counter(hget=1, hset=1, zrem=2, srem=2, sadd=4)
    assert [user for user, _ in top_viewers(redis_client, "day")][-1] == "h1"
    assert redis_client.zcard(keys.top_viewers(period_key())) == 8


@override_settings(ACTIVITY_TRANSITIONS=False)
@pytest.mark.parametrize("seed", range(3))
def test_a_batch_reads_each_bar_once_trims_once_and_keeps_the_true_top(redis_client, wednesday, monkeypatch, seed):
    """A call reads each period's bar once, before its users' counts, and trims once after them: the
    users it let in that the trim sent away are those a bar read before each ZADD would have kept out,
    so the candidates are the true top after every batch, ties to the greater id. A user's views in
    the batch are one counter step."""
    monkeypatch.setattr(sessions_store, "CANDIDATES", 4)
    rng = random.Random(seed)
    now = clock.now()
    day, week = Counter(), Counter()
    monday = [Event(f"w{n}", now - 2 * DAY_S, "/") for n in range(6) for _ in range(rng.randint(1, 6))]
    record(monday, {})
    week.update(event.user for event in monday)
    for _ in range(4):
        views = [PageView(f"u{rng.randint(0, 30)}", "/", now) for _ in range(rng.randint(1, 60))]
        views += [PageView(f"w{rng.randint(0, 5)}", "/", now) for _ in range(rng.randint(0, 10))]
        calls = script_commands(redis_client, *views)
        assert calls["zrange"] == 2 and calls["zremrangebyrank"] <= 2
        users = {view.user for view in views}
        # The day's views and the day's sessions started when a user is new today; 2 HINCRBY a user.
        assert calls["incrby"] == 1 + bool(users - set(day)) and calls["hincrby"] == 2 * len(users)
        day.update(view.user for view in views)
        week.update(view.user for view in views)
        assert top_viewers(redis_client, "day") == true_top(day, 4)
        assert top_viewers(redis_client, "week") == true_top(week, 4)


# One merge call: the EVALSHA, the pending set's marker out (an SREM), an SPOP of the slice, one ZADD
# of it, the index's EXPIRE, the sizes.
MERGE = Counter(evalsha=1, srem=1, spop=1, zadd=1, expire=1, zcard=1, scard=1)


@override_settings(ACTIVITY_REDIS_TIMEOUT=10.0)
@pytest.mark.parametrize("users", [400, 5000])
def test_a_merge_and_a_refresh_run_cost_the_same_commands_whatever_the_backlog(redis_client, users, monkeypatch):
    """Each merge call moves one slice, in the same commands whatever is pending or already in the
    index; a refresh run makes at most SLICES_PER_RUN calls a period, then stops."""
    monkeypatch.setattr(reports, "MERGE_SLICE", 50)
    monkeypatch.setattr(reports, "MERGE_SLICES_PER_RUN", 3)
    now = clock.now()
    for part in batches([Event(f"u{n}", now, "/") for n in range(users)], 1000):
        record(part, {})
    policy = reports.Policy.current()
    reports.merge_pending("day", now, replace(policy, merge_slices=1))  # the script is loaded
    with CommandDelta(redis_client) as delta:
        assert reports.merge_pending("day", now, policy) == (150, users - 200)
    assert delta.calls == {command: 3 * calls for command, calls in MERGE.items()}
    with CommandDelta(redis_client) as delta:
        reports.refresh()  # both periods; no ranked report read lately, so nothing to rebuild
    refresh_own = Counter(multi=1, zremrangebyscore=1, zrange=1, exec=1)  # the reports read lately
    assert delta.calls == refresh_own + Counter({command: 2 * 3 * calls for command, calls in MERGE.items()})
    assert pending_count(redis_client, "day") == users - 350
    assert pending_count(redis_client, "week") == users - 150


def monitored(redis_client, work) -> list[list[str]]:
    """The commands ``work`` sends, as MONITOR sees them."""
    seen: list[list[str]] = []
    ready, done = threading.Event(), threading.Event()

    def watch() -> None:
        with redis_client.monitor() as monitor:
            ready.set()
            for event in monitor.listen():
                command = event["command"].split(" ")
                if command[0].upper() == "ECHO" and "monitor-end" in event["command"]:
                    done.set()
                    return
                seen.append(command)

    thread = threading.Thread(target=watch)
    thread.start()
    ready.wait(5)
    work()
    redis_client.echo("monitor-end")
    done.wait(5)
    thread.join(5)
    return seen


@pytest.mark.parametrize("users", [50, 500])
def test_a_rebuild_sorts_only_the_top_k_in_a_fixed_number_of_commands(redis_client, users, monkeypatch):
    monkeypatch.setattr(reports, "TOP", 5)
    events, names = random_views(7, users)
    record(events, names)
    reports.page("most-active")  # scripts loaded
    with CommandDelta(redis_client) as delta:
        commands = monitored(redis_client, lambda: reports.rebuild("most-active"))
    sorts = [command for command in commands if command[0].upper() == "SORT"]
    assert len(sorts) == 1 and sorts[0][1] == keys.report_candidates(f"most-active:{period_key()}")
    (copy,) = [command for command in commands if command[0].upper() == "ZRANGESTORE"]
    assert copy[2:] == [keys.top_viewers(period_key()), "0", "4", "REV"]  # the top viewers' first 5 only
    for own in ("echo", "monitor", "hello", "ping"):  # the MONITOR connection's
        delta.calls.pop(own, None)
    # The same commands whatever the number of viewers: the lock (a script that SETs it and DELs
    # its announcements), the freshness check, one MULTI, the release (GET, DEL, RPUSH, PEXPIRE).
    assert delta.calls == {
        "evalsha": 2,
        "pttl": 1,
        "multi": 1,
        "zrangestore": 1,
        "sort": 1,
        "del": 3,
        "get": 1,
        "pexpire": 2,
        "set": 2,
        "exec": 1,
        "rpush": 1,
    }
