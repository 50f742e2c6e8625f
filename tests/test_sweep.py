"""The sweep against the key families declared in activity/store/keys.py: every builder declares its
family, a key found without a TTL gets exactly what its family's writers give (or is deleted, or
left alone when long-lived), and nothing any service path writes is ever repaired."""

from __future__ import annotations

import inspect
import secrets
from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from activity import calendar, clock
from activity.events import Event
from activity.models import Funnel
from activity.services import (
    audience,
    cohorts,
    flush,
    groups,
    health,
    idempotency,
    ingest,
    locks,
    privacy,
    rate_limits,
    recommendations,
    reports,
    signin,
    sweep,
    traffic,
)
from activity.store import families, keys

NOON = datetime(2026, 11, 23, 12, tzinfo=UTC).timestamp()
HOUR, DAY = 3600, 86400
LONG, GONE, MERGED = "long-lived", "deleted", "merged"
DRIFT = 30  # seconds a TTL may run down between the sweep and reading it on a loaded machine

# Builder -> (its arguments, what the sweep must do with that key found without a TTL at NOON on
# 2026-11-23, a Monday). Stated here independently of keys.py: audience keys of a day, ISO week or
# month live until the end of the period's last day + 35 days, page statistics 8 days after a write
# (weekly ones and names 15), a session 60 s.
EXPECTED: dict[str, tuple[tuple, str | int]] = {
    "last_seen": ((3,), LONG),
    "last_seen_dirty": ((3,), LONG),
    "last_seen_claimed": ((3,), LONG),
    "unpartitioned_last_seen": ((), LONG),  # an earlier release's, kept until activity_upgrade moves it
    "unpartitioned_last_seen_dirty": ((), LONG),
    "unpartitioned_last_seen_claimed": ((), LONG),
    "visitor_seen": ((3, 7), MERGED),  # legacy first visits: into the current generation, then gone
    # Generation 206 holds day numbers 20600-20699 (2026-05-27 to 2026-09-03; 2026-11-23 is day
    # 20780): 400 days past the 3rd of September 2026 end at midnight on 2027-10-09.
    "visitor_generation": ((3, 206), 320 * DAY - 12 * HOUR),
    "lock": (("job:flush",), GONE),
    "lock_signal": (("job:flush",), GONE),
    "health": ((), GONE),
    "rate_limit": (("ingest", "user:42", 29931200), GONE),
    "new_visitors": ((3, "20261123"), 36 * DAY - 12 * HOUR),
    "new_visitors_harvested": ((3, "20261120"), 33 * DAY - 12 * HOUR),
    "unique_visitors": (("20261122",), 35 * DAY - 12 * HOUR),
    "unique_visitors_week": (("2026W48",), 42 * DAY - 12 * HOUR),  # Sunday 29th + 36 days
    "unique_visitors_month": (("202611",), 43 * DAY - 12 * HOUR),  # the 30th + 36 days
    "active_bits": (("20261020",), 2 * DAY - 12 * HOUR),
    "active_bits_week": (("2026W47",), 35 * DAY - 12 * HOUR),  # ended Sunday 22nd
    "active_bits_month": (("202610",), 13 * DAY - 12 * HOUR),  # ended October 31st
    "dense_ids": ((), LONG),
    "dense_ids_next": ((), LONG),
    "session": (("42",), 60),
    "visitor_session": ((3, "0123456789abcdef0123456789abcdef"), 60),
    "visitor_link": ((3, "0123456789abcdef0123456789abcdef"), 365 * DAY),
    "linked_visitors": (("42",), 365 * DAY),
    "viewer": (("42",), 15 * DAY + 25 * 3600),  # renewed once a day: a day (25 h) longer
    "former_display_name": (("42",), 15 * DAY),
    "sessions_started": (("20261123",), 8 * DAY),
    "page_views": ((3, "20261123"), 8 * DAY),
    "path_views": ((3, "20261123"), 8 * DAY),
    "page_counts_folded": ((3, "20261123"), 8 * DAY),
    "former_page_views": (("20261123",), 8 * DAY),
    "former_path_views": (("20261123",), 8 * DAY),
    "transitions": (("20261123",), 8 * DAY),
    "transitions_index": (("20261123",), 8 * DAY),
    "transition_steps": (("20261123",), 8 * DAY),
    "transitions_cdf": (("20261123+7", "/pricing"), GONE),
    "transitions_total": (("20261123+7", "/pricing"), GONE),
    "recommendations": (("42",), GONE),
    "former_user_views": (("d:20261123", "42"), 15 * DAY),
    "top_viewers": (("w:2026W48",), 15 * DAY),
    "viewers_by_name": (("d:20261123",), 15 * DAY),
    "viewers_by_name_pending": (("w:2026W48",), 15 * DAY),
    "report_candidates": (("most-active:day:20261123",), GONE),
    "report_rows": (("most-active:day:20261123",), GONE),
    "report_meta": (("most-active:day:20261123",), GONE),
    "reports_read": ((), 600),
    "group_view": ((5,), GONE),
    "funnel_states": ((3, 669), 51 * DAY + 12 * HOUR),  # days 20739-20769, kept 62 days past the last
    "former_funnel_state": ((3, "u:42"), GONE),
    "funnel_counts": ((3, "202611"), 43 * DAY - 12 * HOUR),  # as the month's audience keys
    "group_view_build": ((5, "ab12"), GONE),
    "group_epoch": ((5,), GONE),
    "user_groups": ((3,), GONE),
    "group_members": ((5,), LONG),
    "group_active_scratch": ((), GONE),
    "tombstones": (("vis:3",), GONE),
    "traffic": (("20261123",), 36 * DAY - 12 * HOUR),
    "former_display_aliases": (("42",), 15 * DAY),
    "first_day": ((), LONG),
    "first_active": (("20261020",), 192 * DAY - 12 * HOUR),  # 20 October + 26 weeks + 43 days
    "first_moved": (("20260401",), GONE),  # out of retention: no writer renews it
    "cohort_scratch": (("ab12", "cohort"), GONE),
    "retention_table": (("first_seen:day:7:7:all:20261123",), GONE),
    "idempotency": (("ab12",), GONE),
    "batch_writer": (("ses", "ab12"), GONE),
    "session_key_moved": (("next:20261123",), GONE),
    "session_move_scratch": ((), GONE),
    "transitions_trim_scratch": ((), GONE),
    "now_latest": ((), 361),  # the online window, the future skew and a second
    "now_page": ((), 361),
    "now_people": ((), 361),
}
# Functions of keys.py that build no key of their own: SORT / SCAN patterns, and what reads a key's parts.
HELPERS = {
    "former_funnel_state_parts",
    "former_funnel_state_pattern",
    "former_page_counts_day",
    "former_page_counts_pattern",
    "former_session_pattern",
    "former_viewer_parts",
    "former_viewer_patterns",
    "moved_session_key",
    "now_ttl",
    "viewer_pattern",
}


def plant(client, key: str, redis_type: str) -> None:
    """Write ``key`` as ``redis_type`` with no TTL."""
    {
        "string": lambda: client.set(key, "1"),
        "hash": lambda: client.hset(key, "f", "1"),
        "list": lambda: client.rpush(key, "1"),
        "set": lambda: client.sadd(key, "1"),
        "zset": lambda: client.zadd(key, {"m": 1}),
    }[redis_type]()


def builders() -> dict[str, families.Family]:
    return {fam.builder.__name__: fam for fam in families.FAMILIES if fam.builder is not None}


def test_every_builder_declares_a_family_whose_pattern_it_builds():
    public = {
        name
        for name, function in inspect.getmembers(keys, inspect.isfunction)
        if function.__module__ == keys.__name__ and not name.startswith("_")
    }
    assert public - HELPERS == set(builders())  # a builder without @family fails here
    assert public >= HELPERS  # and a helper gone from keys.py leaves the list
    assert set(EXPECTED) == set(builders())  # and the sweep test below must say what it expects
    for name, fam in builders().items():
        placeholders = {param: f"<{param}>" for param in inspect.signature(fam.builder).parameters}
        assert fam.builder(**placeholders) == keys.prefix() + fam.pattern, name
        key = fam.builder(*EXPECTED[name][0])
        matching = [other.builder for other in families.FAMILIES if other.regex.fullmatch(key[len(keys.prefix()) :])]
        assert matching == [fam.builder], key  # exactly one family claims it


def test_sweep_gives_each_family_what_its_writers_give(redis_client, monkeypatch):
    monkeypatch.setattr(clock, "now", lambda: NOON)
    prefix = keys.prefix()
    planted: dict[str, str | int] = {}
    for name, fam in builders().items():
        arguments, outcome = EXPECTED[name]
        key = fam.builder(*arguments)
        plant(redis_client, key, fam.redis_type)
        planted[key] = outcome
    planted[keys.active_bits("garbage")] = 36 * DAY  # no day in its name: the family's longest TTL
    planted[f"{prefix}no-such-family:1"] = sweep.DEFAULT_TTL
    for key in planted:
        if not redis_client.exists(key):
            redis_client.set(key, "1")
    result = sweep.sweep(count=10)
    outcomes = list(planted.values())
    assert (result.repaired, result.deleted, result.merged) == (
        len(planted) - outcomes.count(LONG) - outcomes.count(GONE) - outcomes.count(MERGED),
        outcomes.count(GONE),
        outcomes.count(MERGED),
    )
    # SCAN returns every key at least once, and a key twice when the keyspace was rehashing between
    # two steps (seen on a cluster node still shrinking after earlier tests): a second look counts
    # the key again, and repairs nothing (it has its TTL now, or is gone).
    repeats = result.scanned - len(planted)
    assert repeats >= 0 and 0 <= result.long_lived - outcomes.count(LONG) <= repeats
    for key, outcome in planted.items():
        ttl = redis_client.ttl(key)
        if outcome == LONG:
            assert ttl == -1, key
        elif outcome in (GONE, MERGED):
            assert ttl == -2, key
        else:
            assert outcome - DRIFT <= ttl <= outcome, (key, ttl, outcome)


def snapshot(client) -> dict[str, int]:
    return {key: client.ttl(key) for key in client.scan_iter(match=families.sweep_pattern(), count=1000)}


@pytest.mark.django_db
def test_nothing_any_service_path_writes_is_repaired(redis_client, django_capture_on_commit_callbacks):
    users = get_user_model().objects.bulk_create(get_user_model()(username=f"u{i}") for i in range(3))
    ids = [str(user.pk) for user in users]
    group = Group.objects.create(name="team")
    with django_capture_on_commit_callbacks(execute=True):
        group.user_set.add(*users)
    Funnel.objects.create(name="checkout", steps=["/pricing", "/checkout"], window=3600)  # progress, counts
    now = clock.now()

    def record(ts: float) -> None:
        events = [Event(user=user, ts=ts, path=f"/page/{user}") for user in ids]
        events.append(Event(user="alice", ts=ts, path="/pricing"))
        ingest.record_events(events, visitors=[(secrets.token_hex(16), ts)], names={ids[0]: "u0"})

    record(now)
    ingest.record_events([Event(user="alice", ts=now + 0.5, path="/checkout")])  # a transition
    ingest.record_events([Event(user="alice", ts=now + 0.6, path="/a")], names={"alice": "Alice"})  # renamed
    ingest.record_events([Event(user="gone", ts=now, path="/x")])
    privacy.erase("gone")  # tombstones
    visitor = secrets.token_hex(16)  # a visitor's session, then a sign-in: its link and joined pages
    ingest.record_events([], visitors=[(visitor, now)], visitor_views=[(visitor, now, "/pricing")])
    signin.continue_visitor(visitor, "alice")
    ingest.record_events([], visitors=[(visitor, now)], visitor_views=[(visitor, now, "/docs")])  # signed out
    idempotency.once(  # a kept answer
        "sweep-test",
        "key",
        {},
        lambda fence: {"n": ingest.record_events([Event("i", now, "/i")], fence=fence).accepted},
    )
    ingest.record_events([], kind=traffic.BOT)  # the day's bots and machines
    assert recommendations.for_user("alice") == []  # computed and cached for alice's session
    assert recommendations.next_pages("/pricing", 1)[1] == ["/checkout"]  # cumulative copy, lock
    assert groups.members_page(group.pk, 0, 10) is not None  # view, membership index, epoch
    ingest.record_events([Event(user=ids[1], ts=now + 1)])  # a live update of the view
    audience.stats()  # week and month unions
    ingest.record_events([Event(user=ids[2], ts=now - 2 * DAY)])  # late: a first day moved back
    cohorts.table(cohorts.Query(group=group.pk))  # a cached table, its lock; scratch bitmaps gone
    for name, _ in reports.catalogue():
        for period in ("day", "week"):
            reports.page(name, period)  # copies, read list, rebuild lock and its announcement
    flush.flush()
    audience.rollup_day(calendar.day_of(now))  # harvests the new-visitor counters
    record(now + 2)  # dirty marks and new-visitor counters again
    ingest.record_events([Event(user="late", ts=now + 2, path="/x")])  # by-name entries the reads have not merged
    health.status()
    rate_limits.send([rate_limits.hit("sweep-test", "client", 10, 60).window])
    with locks.exclusive("sweep-test", 30) as held:
        assert held
        before = snapshot(redis_client)
        types = {key: redis_client.type(key) for key in before}
        result = sweep.sweep()
        after = snapshot(redis_client)

    assert (result.repaired, result.deleted) == (0, 0)
    assert after.keys() == before.keys()
    found = {}
    for key, ttl in before.items():
        declared = families.family_of(key)
        assert declared is not None, key  # every key written is of a declared family
        fam = declared[0]
        found[fam.pattern] = fam
        assert types[key] == fam.redis_type, key
        assert (ttl == -1) == (fam.lifetime.kind == "long-lived"), (key, ttl)
        assert before[key] - DRIFT <= after[key] <= before[key], key  # only time passed
    unwritten = {fam.pattern for fam in families.FAMILIES} - set(found)
    # Every family was written, except those that exist only mid-flush or mid-build, and the
    # last-seen layout of earlier releases, which only the upgrade reads.
    assert unwritten == {
        "{ls}:seen",
        "{ls}:dirty",
        "{ls}:claimed",
        "{ls:<partition>}:claimed",
        "{grp:<group_id>}:build:<token>",
        "{au}:group-and",  # written and deleted inside one script call
        "{ses}:moving",  # the same
        "{ses}:next-trim",  # the same
        "{ses}:steps:<day>",  # between a batch's session calls and its count, in one pipeline
        "{ses}:moved:<key>",  # written by the upgrade alone
        "{pv}:report:<report_id>:candidates",  # a SORT's input, deleted in its MULTI (none on a cluster)
        "{au}:scratch:<token>:<name>",  # a retention table's intermediates, deleted by its build
        "{vis:<shard>}:seen:<partition>",  # first visits of releases before generations
        "{pv}:name:<user>",  # display names and view counters of releases before the views hash
        "{pv}:uv:<period>:<user>",
        "{pv}:aliases:<user>",  # former display names of releases before the views hash's fields
        "{fn:<partition>}:person:<person>",  # funnel progress of releases before its generations
        "{pv}:views:<day>",  # page counts of releases before the path partitions
        "{pv}:paths:<day>",
        "{paths:<partition>}:folded:<day>",  # written by the upgrade alone
    }
