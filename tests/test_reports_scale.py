"""Reports at scale: no command sorts every viewer, yet the rows equal a full sort.

The ranked report SORTs only the top K of the period's ranking; the by-name report is read from
the index the page-view script keeps. Both are compared with the full-SORT shapes the service used
before (``SORT <every viewer> BY ... GET ...``) on random data, and their cost is counted.
"""

from __future__ import annotations

import random
import threading

import pytest
from django.test import override_settings

from activity import calendar, clock, reports, services
from activity.events import Event
from activity.store import keys
from tests.redis_counts import CommandDelta
from tests.redis_probe import probe


def seed_random(seed: int, users: int) -> dict[str, tuple[str, int]]:
    """``users`` users with random view counts (many ties) and random names (some shared, some
    unknown: the id stands in); returns user -> (shown name, views)."""
    rng = random.Random(seed)
    now = clock.now()
    truth: dict[str, tuple[str, int]] = {}
    events, names = [], {}
    for n in range(users):
        user = f"{rng.choice('abcxyz')}{n}"
        views = rng.randint(1, 6)
        name = rng.choice([None, f"n{rng.randint(0, users // 4)}", f"N{rng.randint(0, 9)}", f"{n:04d}"])
        if name is not None:
            names[user] = name
        events += [Event(user, now, f"/p{i}") for i in range(views)]
        truth[user] = (name or user, views)
    for start in range(0, len(events), 500):
        batch = events[start : start + 500]
        services.record_events(batch, names={e.user: names[e.user] for e in batch if e.user in names})
    return truth


def period_key() -> str:
    return calendar.period_name("day", calendar.day_of(clock.now()))


def full_sort(redis_client, **options) -> list[str]:
    """The old shape: one SORT over every viewer of the period (the ranking holds them all)."""
    pkey = period_key()
    return redis_client.sort(
        keys.view_ranking(pkey), get=["#", keys.display_name_pattern(), keys.user_views_pattern(pkey)], **options
    )


def all_rows(name: str, size: int = 37) -> list[dict]:
    rows, number = [], 1
    while True:
        found, _ = reports.page(name, "day", number, size)
        rows += found.rows
        if number * size >= found.count:
            return rows
        number += 1


@pytest.mark.parametrize("seed", [1, 2, 3])
@override_settings(ACTIVITY_REPORT_TOP=25)
def test_most_active_equals_the_full_sort_on_random_data(redis_client, seed):
    seed_random(seed, 300)
    expected = full_sort(redis_client, by=keys.user_views_pattern(period_key()), desc=True, start=0, num=25)
    rows = all_rows("most-active")
    assert [value for row in rows for value in (row["user"], row["name"], str(row["views"]))] == expected


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_active_by_name_equals_the_full_sort_on_random_data(redis_client, seed):
    truth = seed_random(seed, 300)
    rows = all_rows("active-by-name")
    # SORT ALPHA leaves the order of equal names undefined; the index breaks ties by user id.
    assert [(row["user"], row["name"], row["views"]) for row in rows] == sorted(
        ((user, name, views) for user, (name, views) in truth.items()), key=lambda r: (r[1].encode(), r[0].encode())
    )
    flat = full_sort(redis_client, by=keys.display_name_pattern(), alpha=True)
    assert [row["name"] for row in rows] == flat[1::3]  # the same names in the same order
    assert sorted((row["user"], row["name"]) for row in rows) == sorted(zip(flat[0::3], flat[1::3], strict=True))


def test_a_new_username_moves_the_user_in_the_by_name_index(redis_client):
    now = clock.now()
    services.record_events([Event("7", now, "/a")], names={"7": "zed"})
    services.record_events([Event("8", now, "/a")])
    services.record_events([Event("7", now, "/b")], names={"7": "amy"})
    services.record_events([Event("7", now, "/c")])  # no name known this time: the last one stays
    rows = all_rows("active-by-name")
    assert [(row["user"], row["name"], row["views"]) for row in rows] == [("8", "8", 1), ("7", "amy", 3)]
    assert redis_client.zcard(keys.viewers_by_name(period_key())) == 2


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


@override_settings(ACTIVITY_REPORT_TOP=5)
@pytest.mark.parametrize("users", [50, 500])
def test_a_rebuild_sorts_only_the_top_k_in_a_fixed_number_of_commands(redis_client, users):
    seed_random(7, users)
    reports.page("most-active")  # scripts loaded
    with CommandDelta(redis_client) as delta:
        commands = monitored(redis_client, lambda: reports.rebuild("most-active"))
    sorts = [command for command in commands if command[0].upper() == "SORT"]
    assert len(sorts) == 1 and sorts[0][1] == keys.report_candidates(f"most-active:{period_key()}")
    (copy,) = [command for command in commands if command[0].upper() == "ZRANGESTORE"]
    assert copy[3:] == ["0", "4", "REV"]  # the ranking's top 5 only
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


def test_by_name_pages_are_one_round_trip_and_never_sort(redis_client):
    seed_random(8, 200)
    reports.page("active-by-name")  # the script is loaded
    with probe(redis_client) as seen:
        found, cache = reports.page("active-by-name", "day", 3, 20)
    assert cache == "hit" and found.count == 200 and len(found.rows) == 20
    assert (seen.client_sends, seen.server_reads) == (1, 1)
    assert seen.commands["sort"] == 0 and seen.commands["zrange"] == 1
