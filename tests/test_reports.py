"""Cached reports: one build (one SORT on a standalone server) however many readers, stale while
rebuilding, exact ordering."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.test import override_settings

from activity import clock
from activity.events import Event
from activity.schedule import reports as reports_schedule
from activity.services import ingest, reports
from activity.store import keys
from activity.store.client import is_cluster
from activity.store.locks import Lock
from activity.tasks import refresh_reports as refresh_task
from tests.redis_probe import probe

NAMES = {f"u{i}": f"name-{(i * 7) % 13:02d}-{i}" for i in range(12)}


def seed(views_per_user: dict[str, int] | None = None) -> dict[str, int]:
    """Page views per user (some users with no username known: their id stands in)."""
    views_per_user = views_per_user or {user: (i * 5) % 7 + 1 for i, user in enumerate(NAMES)}
    now = clock.now()
    events = [Event(user, now, f"/p{n}") for user, count in views_per_user.items() for n in range(count)]
    named = {user: name for user, name in NAMES.items() if user != "u3"}
    ingest.record_events(events, names=named)
    return views_per_user


def concurrently(n: int, work) -> list:
    barrier, results = threading.Barrier(n), [None] * n

    def run(i: int) -> None:
        barrier.wait()
        results[i] = work()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def counting_builds(monkeypatch) -> list[int]:
    """The ranked copies built from now on (one entry per ``store.build_ranked`` call). A standalone
    server's build is one SORT, which the tests count on the server too; a cluster's runs none (SORT
    may not use BY and GET patterns there)."""
    builds: list[int] = []
    build = reports.store.build_ranked

    def counted(*args: Any, **kwargs: Any) -> None:
        builds.append(1)
        build(*args, **kwargs)

    monkeypatch.setattr(reports.store, "build_ranked", counted)
    return builds


def sorts_per_build(redis_client) -> int:
    return 0 if is_cluster(redis_client) else 1


def test_stampede_of_50_cold_readers_runs_one_sort(redis_client, monkeypatch):
    seed()
    builds = counting_builds(monkeypatch)
    with probe(redis_client) as counted:
        answers = concurrently(50, lambda: reports.page("most-active", "day", 1, 50))
    assert len(builds) == 1
    assert counted.commands["sort"] == sorts_per_build(redis_client)
    assert len({tuple((r["user"], r["views"]) for r in found.rows) for found, _ in answers}) == 1
    assert sorted(cache for _, cache in answers).count("miss") >= 1
    assert {cache for _, cache in answers} <= {"miss", "hit"}


def slowed(build: Callable[..., Any], seconds: float = 0.05) -> Callable[..., Any]:
    """``build`` holding its lock ``seconds`` longer before it starts, so concurrent readers meet it
    in flight (a build alone takes about a millisecond)."""

    def slow_build(*args: Any, **kwargs: Any) -> Any:
        time.sleep(seconds)
        return build(*args, **kwargs)

    return slow_build


@override_settings(ACTIVITY_REPORT_TTL=1)
def test_expiry_during_load_serves_stale_and_sorts_once_per_expiry(redis_client, monkeypatch):
    monkeypatch.setattr(reports, "STALE_S", 5)
    seed()
    reports.page("most-active")  # the copy that will go stale
    # Each build holds its lock 50 ms before its SORT, so the readers meet builds in flight: a build
    # takes about a millisecond, and on a busy machine no reader may come in that window at all.
    monkeypatch.setattr(reports, "build_copy", slowed(reports.build_copy))
    builds = counting_builds(monkeypatch)
    caches: list[str] = []
    generations: set[float] = set()
    started = time.monotonic()

    def reader() -> None:
        while time.monotonic() - started < 2.5:
            found, cache = reports.page("most-active")
            caches.append(cache)
            generations.add(found.generated_at)
            time.sleep(0.02)

    with probe(redis_client) as counted:
        concurrently(50, reader)
    elapsed = time.monotonic() - started
    assert "stale" in caches and "hit" in caches
    # One build per expiry: each build starts a new 1 s freshness window, so at most one per second.
    assert len(builds) == len(generations) - 1 >= 2
    assert len(builds) <= int(elapsed) + 1
    assert counted.commands["sort"] == len(builds) * sorts_per_build(redis_client)


def test_a_holder_whose_lock_expired_cannot_release_the_new_holders_lock(redis_client):
    old = Lock(redis_client, "report:most-active:d:x", 100)
    assert old.acquire()
    time.sleep(0.2)
    new = Lock(redis_client, "report:most-active:d:x", 5000)
    assert new.acquire()
    assert old.release() is False
    assert redis_client.get(keys.lock("report:most-active:d:x")) == new.token


def test_a_dead_holder_is_replaced_after_the_lock_ttl(redis_client, monkeypatch):
    monkeypatch.setattr(reports, "WAIT_S", 0.5)
    seed()
    name = reports.lock_name(reports.REGISTRY["most-active"], "day", clock.now())
    assert Lock(redis_client, name, 500).acquire()  # the holder dies, never builds
    started = time.monotonic()
    found, cache = reports.page("most-active")
    assert cache == "miss" and found.count == len(NAMES)
    assert 0.3 < time.monotonic() - started < 4  # after the 0.5 s lock TTL, long before the 10 s wait bound


@pytest.mark.parametrize("period", ["day", "week"])
def test_pages_and_order_match_the_same_sort_in_python(staff_api, redis_client, period):
    views = seed()
    names = {user: NAMES[user] if user != "u3" else user for user in views}
    by_views = sorted(views, key=lambda user: (views[user], user), reverse=True)
    by_name = sorted(views, key=lambda user: names[user].encode())
    for report, expected in (("most-active", by_views), ("active-by-name", by_name)):
        url, rows = f"/api/v1/reports/{report}/?period={period}&page_size=5", []
        while url:
            answer = staff_api.get(url)
            assert answer.status_code == 200, answer.data
            assert answer["X-Cache"] in {"hit", "miss"} and answer.data["count"] == len(views)
            rows += answer.data["results"]
            url = answer.data["next"]
        assert [row["user"] for row in rows] == expected
        assert [row["rank"] for row in rows] == list(range(1, len(views) + 1))
        assert all(row["views"] == views[row["user"]] and row["name"] == names[row["user"]] for row in rows)


def test_by_name_says_stale_while_new_viewers_wait_to_be_merged(staff_api, redis_client, monkeypatch):
    monkeypatch.setattr(reports, "MERGE_SLICE", 5)
    seed()  # 12 new viewers, pending
    answer = staff_api.get("/api/v1/reports/active-by-name/")
    assert answer["X-Cache"] == "stale"  # this read merged 5 of them; 7 are missing
    assert (answer.data["count"], answer.data["expires_in"]) == (5, 0)
    reports.refresh()
    answer = staff_api.get("/api/v1/reports/active-by-name/")
    assert answer["X-Cache"] == "hit" and answer.data["count"] == len(NAMES) and answer.data["expires_in"] > 0


def test_recompute_of_by_name_merges_what_is_pending(redis_client):
    seed()
    assert reports.rebuild("active-by-name", "week") == "built"  # the admin's "recompute now"
    assert reports.rebuild("active-by-name", "week") == "fresh"  # nothing left to merge
    found, cache = reports.page("active-by-name", "week")
    assert cache == "hit" and found.count == len(NAMES)


def test_ranked_report_keeps_the_top_n(staff_api, redis_client, monkeypatch):
    monkeypatch.setattr(reports, "TOP", 3)
    views = seed()
    answer = staff_api.get("/api/v1/reports/most-active/")
    assert [row["user"] for row in answer.data["results"]] == sorted(views, key=lambda u: (views[u], u), reverse=True)[
        :3
    ]


def test_hit_is_one_round_trip_with_one_lrange(redis_client):
    seed()
    reports.page("most-active")
    with probe(redis_client) as counted:
        _, cache = reports.page("most-active")
    assert cache == "hit"
    assert counted.client_sends == 1 and counted.commands["lrange"] == 1 and counted.commands["sort"] == 0


@pytest.mark.parametrize(
    ("url", "status", "field"),
    [
        ("/api/v1/reports/nope/", 404, None),
        ("/api/v1/reports/most-active/?period=year", 400, "period"),
        ("/api/v1/reports/most-active/?page=0", 400, "page"),
        ("/api/v1/reports/most-active/?page=x", 400, "page"),
        ("/api/v1/reports/most-active/?page_size=0", 400, "page_size"),
        ("/api/v1/reports/most-active/?page_size=501", 400, "page_size"),
        ("/api/v1/reports/most-active/?page=9", 404, None),
    ],
)
def test_bad_name_period_page_and_page_size(staff_api, redis_client, url, status, field):
    seed()
    answer = staff_api.get(url)
    assert answer.status_code == status
    if field:
        assert field in answer.data


def test_reports_are_staff_only_and_listed(staff_api, member_api, redis_client):
    assert member_api.get("/api/v1/reports/most-active/").status_code == 403
    listed = staff_api.get("/api/v1/reports/").data
    assert {row["name"] for row in listed["results"]} == {"most-active", "active-by-name"}


@override_settings(ACTIVITY_REPORT_TTL=60)
def test_refresh_rebuilds_only_reports_read_lately_and_soon_to_expire(redis_client, monkeypatch):
    monkeypatch.setattr(reports, "REPORT_REFRESH_INTERVAL", 40)
    seed()
    reports.page("most-active")  # read: 60 s fresh, below two intervals (80 s) -> refreshed
    builds = counting_builds(monkeypatch)
    with probe(redis_client) as counted:
        assert refresh_task() == 1
    assert len(builds) == 1
    assert counted.commands["sort"] == sorts_per_build(redis_client)
    monkeypatch.setattr(reports, "REPORT_REFRESH_INTERVAL", 15)  # 60 s left > 30 s margin: kept
    assert reports.refresh() == 0
    entry = reports_schedule()["refresh-reports"]
    assert entry["options"]["expires"] == entry["schedule"]


def test_every_report_key_has_a_ttl(redis_client):
    seed()
    reports.page("most-active")
    reports.page("active-by-name", "week")
    for key in redis_client.scan_iter(match=f"*{keys.PV_TAG}*", count=1000):
        assert redis_client.ttl(key) > 0, key
