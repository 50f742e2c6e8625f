"""Group views: exists-only upserts never create partial views, views stay exact, membership and
sweep keep them honest, and the members API pages, permits and validates per docs/api.md."""

from __future__ import annotations

import multiprocessing
import random
import threading
import time

import pytest
import redis
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from activity.events import Event
from activity.services import groups, ingest, sweep
from activity.store import groups as store
from activity.store import keys
from tests.last_seen_state import stored
from tests.redis_counts import CommandDelta

NOW = 1_790_000_000.0


def group_keys() -> str:
    """SCAN pattern of every group-view key, the index's partitions included (each has a TTL;
    ``sweep`` deletes strays)."""
    return f"{keys.prefix()}{{grp[:-]*"


def index(client) -> dict[str, str]:
    """The whole user -> groups index, every partition's entries."""
    return {
        user: ids for p in range(store.INDEX_PARTITIONS) for user, ids in client.hgetall(keys.user_groups(p)).items()
    }


def make_group(name: str, size: int, prefix: str | None = None) -> tuple[Group, list[str]]:
    group = Group.objects.create(name=name)
    users = get_user_model().objects.bulk_create(
        get_user_model()(username=f"{prefix or name}-{i}") for i in range(size)
    )
    group.user_set.add(*users)
    return group, [str(u.pk) for u in users]


def record(user: str, ts: float) -> None:
    ingest.record_events([Event(user=user, ts=ts)])


def view(redis_client, group: Group) -> list[tuple[str, float]]:
    return redis_client.zrevrange(keys.group_view(group.pk), 0, -1, withscores=True)


def expected_order(redis_client, members: list[str]) -> list[tuple[str, float]]:
    """The members as the last-seen index ranks them (never seen = -1), view order."""
    scores = [stored(redis_client).get(member) for member in members]
    rows = [(m, store.NEVER if s is None else s) for m, s in zip(members, scores, strict=True)]
    return sorted(rows, key=lambda r: (r[1], r[0]), reverse=True)


# --- API ------------------------------------------------------------------------------------------


def test_members_paged_most_recent_first_never_seen_last(staff_api, redis_client):
    group, users = make_group("g", 5)
    for offset, user in enumerate(users[:3]):
        record(user, NOW + offset)
    first = staff_api.get(f"/api/v1/groups/{group.pk}/members/?page_size=2").json()
    assert first["group"] == group.pk and first["count"] == 5 and first["previous"] is None
    assert [r["user"] for r in first["results"]] == [users[2], users[1]]
    assert first["results"][0]["ts"] == NOW + 2 and first["results"][0]["last_seen"].endswith("Z")
    second = staff_api.get(first["next"]).json()
    assert [r["user"] for r in second["results"]] == [users[0], *sorted(users[3:5], reverse=True)[:1]]
    third = staff_api.get(second["next"]).json()
    assert third["next"] is None and "page=2" in third["previous"]
    never = [r for r in second["results"] + third["results"] if r["ts"] is None]
    assert {r["user"] for r in never} == set(users[3:]) and all(r["last_seen"] is None for r in never)
    assert 0 < redis_client.ttl(keys.group_view(group.pk)) <= 300


def test_warm_read_is_one_pipeline_and_no_query(db, redis_client, django_assert_num_queries):
    group, users = make_group("g", 30)
    record(users[0], NOW)
    assert groups.members_page(group.pk, 10, 10).count == 30  # cold: builds the view
    with django_assert_num_queries(0), CommandDelta(redis_client) as delta:
        page = groups.members_page(group.pk, 10, 10)
    assert len(page.rows) == 10 and page.count == 30
    # one ZCARD + one ZREVRANGE + one GET (the epoch), sent as one pipeline; nothing rebuilt
    assert delta.calls == {"zcard": 1, "zrevrange": 1, "get": 1}


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/api/v1/groups/abc/members/", "group_id"),
        ("/api/v1/groups/0/members/", "group_id"),
        ("/api/v1/groups/-3/members/", "group_id"),
        ("/api/v1/groups/99999999999999999999/members/", "group_id"),
        ("/api/v1/groups/{pk}/members/?page=0", "page"),
        ("/api/v1/groups/{pk}/members/?page=x", "page"),
        ("/api/v1/groups/{pk}/members/?page_size=0", "page_size"),
        ("/api/v1/groups/{pk}/members/?page_size=100000", "page_size"),
    ],
)
def test_bad_input_is_400_and_writes_nothing(staff_api, redis_client, path, field):
    group, _ = make_group("g", 3)
    response = staff_api.get(path.format(pk=group.pk))
    assert response.status_code == 400
    assert field in response.json() and isinstance(response.json()[field], list)
    assert list(redis_client.scan_iter(match=group_keys())) == []


def test_permissions_and_unknown_group(staff_api, member_api, redis_client):
    from tests.clients import APIClient

    group, _ = make_group("g", 2)
    assert APIClient().get(f"/api/v1/groups/{group.pk}/members/").status_code == 401
    assert member_api.get(f"/api/v1/groups/{group.pk}/members/").status_code == 403
    assert staff_api.get(f"/api/v1/groups/{group.pk + 1000}/members/").status_code == 404
    empty = Group.objects.create(name="empty")
    body = staff_api.get(f"/api/v1/groups/{empty.pk}/members/").json()
    assert body["count"] == 0 and body["results"] == [] and body["next"] is None


# --- live updates, exists-only ---------------------------------------------------------------------


def test_updates_reach_existing_views_only(staff_api, redis_client):
    group, users = make_group("g", 4)
    other, other_users = make_group("other", 3)
    staff_api.get(f"/api/v1/groups/{group.pk}/members/")
    record(users[1], NOW + 5)
    record(other_users[0], NOW + 9)  # member of a group without a view: none is created
    assert view(redis_client, group)[0] == (users[1], NOW + 5)
    assert redis_client.exists(keys.group_view(other.pk)) == 0
    record(users[1], NOW + 1)  # out of order: never moves back
    assert view(redis_client, group)[0] == (users[1], NOW + 5)
    assert len(view(redis_client, group)) == 4
    redis_client.delete(keys.group_view(group.pk))  # as if expired: the members' index remains
    record(users[2], NOW + 20)
    assert redis_client.exists(keys.group_view(group.pk)) == 0


def test_second_round_trip_only_for_members_of_materialized_views(staff_api, redis_client):
    group, users = make_group("g", 3)
    outsider = make_group("o", 1)[1][0]
    staff_api.get(f"/api/v1/groups/{group.pk}/members/")
    with CommandDelta(redis_client) as delta:
        record(outsider, NOW)
    # Scripts' own commands are counted too: last seen (a script, with its EXISTS of the tombstones)
    # and the batch's users' entries in the group index (one HMGET).
    outside = delta.calls
    assert (outside["evalsha"], outside["hmget"], outside["exists"]) == (1, 1, 1)
    with CommandDelta(redis_client) as delta:
        record(users[0], NOW)
    sent = delta.calls
    assert (sent["evalsha"], sent["hmget"], sent["exists"]) == (1, 1, 1)
    assert sent["zadd"] == outside["zadd"] + 1  # + the view's ZADD XX GT


def test_a_batch_reads_its_users_index_entries_in_one_command_a_partition(staff_api, redis_client):
    """No view built: the index does not exist, and the batch's HMGETs, one per index partition of
    its users, find nothing to update; once one is built, the same commands find its members."""
    group, users = make_group("g", 12)
    partitions = len({store.index_key(user) for user in users})
    assert partitions > 1  # 12 users over 16 partitions: the index spreads
    with CommandDelta(redis_client) as delta:
        ingest.record_events([Event(user=user, ts=NOW) for user in users])
    before = delta.calls
    assert (before["evalsha"], before["hmget"]) == (1, partitions)
    assert index(redis_client) == {}
    staff_api.get(f"/api/v1/groups/{group.pk}/members/")
    assert index(redis_client) == {user: str(group.pk) for user in users}
    assert all(redis_client.ttl(store.index_key(user)) > groups.VIEW_TTL for user in users)
    with CommandDelta(redis_client) as delta:
        ingest.record_events([Event(user=user, ts=NOW + 1) for user in users])
    assert (delta.calls["evalsha"], delta.calls["hmget"]) == (1, partitions)
    assert delta.calls["zadd"] == before["zadd"] + 1  # + the view's ZADD XX GT
    assert {ts for _, ts in view(redis_client, group)} == {NOW + 1}


def test_the_index_lives_as_long_as_its_longest_build(db, redis_client):
    client = redis_client
    store.build(client, 1, {"a": None}, "", 1000)
    store.build(client, 2, {"a": None}, "", 10)  # a shorter build does not cut the index short
    assert client.ttl(store.index_key("a")) > 1000
    store.build(client, 3, {"a": None}, "", 5000)
    assert client.ttl(store.index_key("a")) > 5000
    assert index(client) == {"a": "1,2,3"}


def test_an_index_entry_gains_and_loses_group_ids_and_goes_when_empty(db, redis_client):
    client = redis_client
    for group_id in (4, 9, 4):  # a rebuild adds nothing twice
        store.build(client, group_id, {"a": None, "b": None}, "", 100)
    assert index(client) == {"a": "4,9", "b": "4,9"}
    store.drop(client, [4], [(4, "a"), (4, "b")], 100)
    store.drop(client, [9], [(9, "a")], 100)
    assert index(client) == {"b": "9"}


def _burst(members: list[str], seconds: float, seed: int) -> None:
    rnd = random.Random(seed)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        batch = rnd.sample(members, 5)
        ingest.record_events([Event(user=u, ts=NOW + rnd.random() * 1000) for u in batch])


def _processes(target, args_list) -> list[multiprocessing.Process]:
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=target, args=args) for args in args_list]
    for proc in procs:
        proc.start()
    return procs


@pytest.mark.django_db(transaction=True)
def test_no_partial_view_while_views_expire_during_a_burst(redis_client, monkeypatch):
    """TTL 1 s: views expire mid-burst and are rebuilt; no one ever sees a view short of members."""
    group, users = make_group("g", 40)
    monkeypatch.setattr(groups, "VIEW_TTL", 1)
    assert groups.members_page(group.pk, 0, 10).count == 40
    # 2.5 s of writes: the view expires at ~1 s, is rebuilt once, expires again at ~2 s and
    # stays gone for the last ~0.5 s of the burst, while writers still hold its index entries.
    procs = _processes(_burst, [(users, 2.5, seed) for seed in range(4)])
    sizes = set()
    rebuilds = 0
    while any(p.is_alive() for p in procs):
        size = redis_client.zcard(keys.group_view(group.pk))
        sizes.add(size)
        if size == 0 and rebuilds < 1:
            rebuilds += 1
            assert groups.members_page(group.pk, 0, 10).count == 40
    for proc in procs:
        proc.join()
        assert proc.exitcode == 0
    assert sizes <= {0, 40} and 0 in sizes and 40 in sizes  # expired at least once, never partial
    assert rebuilds == 1 and redis_client.exists(keys.group_view(group.pk)) == 0


@pytest.mark.django_db(transaction=True)
def test_views_exact_after_concurrent_out_of_order_updates_and_rebuilds(redis_client):
    """Writers in 4 processes send shuffled timestamps while the view is dropped and rebuilt."""
    group, users = make_group("g", 40)
    groups.members_page(group.pk, 0, 10)
    procs = _processes(_burst, [(users, 2.0, seed) for seed in range(4)])
    while any(p.is_alive() for p in procs):
        store.drop(redis_client, [group.pk], [], 300)  # forces builds racing the writers
        groups.members_page(group.pk, 0, 10)
    for proc in procs:
        proc.join()
        assert proc.exitcode == 0
    page = groups.members_page(group.pk, 0, 100)
    assert [(u, store.NEVER if t is None else t) for u, t in page.rows] == expected_order(redis_client, users)
    assert view(redis_client, group) == expected_order(redis_client, users)


def test_views_exact_after_concurrent_threads(db, redis_client):
    group, users = make_group("g", 30)
    groups.members_page(group.pk, 0, 10)
    threads = [threading.Thread(target=_burst, args=(users, 1.0, seed)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert view(redis_client, group) == expected_order(redis_client, users)


# --- builds, membership, sweep -----------------------------------------------------------------------


def test_the_drop_script_refuses_bad_arguments_and_changes_nothing(redis_client):
    epoch, view = keys.group_epoch(8), keys.group_view(8)
    redis_client.zadd(view, {"a": 1.0})
    for script_keys, args in (([epoch, view], [0]), ([epoch, view], ["soon"]), ([epoch], [60])):
        with pytest.raises(redis.ResponseError, match="group_view_drop"):
            store.DROP(redis_client, script_keys, args)
    assert redis_client.exists(epoch) == 0 and redis_client.zcard(view) == 1


def test_build_raced_by_membership_change_is_discarded(redis_client):
    seen_epoch = store.epoch(redis_client, 7)
    store.drop(redis_client, [7], [], 300)  # a membership change lands while we build
    assert 300 < redis_client.ttl(keys.group_epoch(7)) <= 300 + store.INDEX_SLACK  # never without one
    assert store.build(redis_client, 7, {"a": 1.0, "b": None}, seen_epoch, 300) is False
    assert redis_client.exists(keys.group_view(7)) == 0
    assert list(redis_client.scan_iter(match=keys.group_view_build(7, "*"))) == []
    assert store.build(redis_client, 7, {"a": 1.0, "b": None}, store.epoch(redis_client, 7), 300) is True
    assert redis_client.zrevrange(keys.group_view(7), 0, -1, withscores=True) == [("a", 1.0), ("b", -1.0)]


def test_membership_changes_reflected_on_next_read(staff_api, redis_client, django_capture_on_commit_callbacks):
    group, users = make_group("g", 3)
    url = f"/api/v1/groups/{group.pk}/members/"
    User = get_user_model()
    newcomer = User.objects.create_user("newcomer")
    record(str(newcomer.pk), NOW)
    assert staff_api.get(url).json()["count"] == 3

    with django_capture_on_commit_callbacks(execute=True):
        newcomer.groups.add(group)  # forward side
    body = staff_api.get(url).json()
    assert body["count"] == 4 and body["results"][0]["user"] == str(newcomer.pk)
    assert str(group.pk) in index(redis_client)[str(newcomer.pk)].split(",")

    with django_capture_on_commit_callbacks(execute=True):
        group.user_set.remove(newcomer)  # reverse side
    assert staff_api.get(url).json()["count"] == 3
    assert str(newcomer.pk) not in index(redis_client)
    record(str(newcomer.pk), NOW + 10)  # a former member's update stays out
    assert str(newcomer.pk) not in [r["user"] for r in staff_api.get(url).json()["results"]]

    with django_capture_on_commit_callbacks(execute=True):
        User.objects.get(pk=users[0]).delete()
    assert staff_api.get(url).json()["count"] == 2

    with django_capture_on_commit_callbacks(execute=True):
        group.user_set.clear()
    assert staff_api.get(url).json()["count"] == 0

    with django_capture_on_commit_callbacks(execute=True):
        group.delete()
    assert staff_api.get(url).status_code == 404


def test_sweep_removes_planted_view_without_ttl_only(staff_api, redis_client):
    group, _ = make_group("g", 3)
    staff_api.get(f"/api/v1/groups/{group.pk}/members/")  # a healthy view, index and epoch keys
    redis_client.zadd(keys.group_view(424242), {"rogue": 1.0})  # planted: no TTL
    redis_client.zadd(keys.last_seen(0), {"x": 1.0})  # long-lived, another family: untouched
    assert sweep.sweep().deleted == 1  # the generic sweep job's rule for the {grp} family
    assert redis_client.exists(keys.group_view(424242)) == 0
    assert redis_client.exists(keys.group_view(group.pk)) == 1
    assert stored(redis_client) != {}
    assert all(redis_client.ttl(k) > 0 for k in redis_client.scan_iter(match=group_keys()))
    assert sweep.sweep().deleted == 0


def test_update_landing_between_build_read_and_publish_is_caught_up(db, redis_client, monkeypatch):
    """The race the catch-up pass closes: last seen moves after the build read it, before publish."""
    group, users = make_group("g", 5)
    record(users[0], NOW)
    real_get_many = groups.last_seen_store.get_many
    raced = []

    def get_many_then_race(client, members):
        scores = real_get_many(client, members)
        if not raced:
            raced.append(True)
            record(users[3], NOW + 50)  # no view yet: propagate skips it
        return scores

    monkeypatch.setattr(groups.last_seen_store, "get_many", get_many_then_race)
    page = groups.members_page(group.pk, 0, 10)
    assert raced and page.rows[0] == (users[3], NOW + 50)
    assert view(redis_client, group) == expected_order(redis_client, users)


def test_update_landing_between_index_edit_and_publish_is_caught_up(db, redis_client, monkeypatch):
    """The build's own window: the members' index entries are written (their own round trip, as the
    index is spread over other slots) and the view is not published yet. An update then finds the
    entry but no view; the catch-up pass applies it."""
    group, users = make_group("g", 5)
    record(users[0], NOW)
    real_build_key = store.keys.group_view_build
    raced = []

    def build_key_then_race(group_id: int, token: str) -> str:
        if not raced:
            raced.append(True)
            assert str(group.pk) in index(redis_client)[users[3]]
            record(users[3], NOW + 50)  # the entry is there, the view is not: ZADD XX adds nothing
            assert redis_client.exists(keys.group_view(group.pk)) == 0
        return real_build_key(group_id, token)

    monkeypatch.setattr(store.keys, "group_view_build", build_key_then_race)
    page = groups.members_page(group.pk, 0, 10)
    assert raced and page.rows[0] == (users[3], NOW + 50)
    assert view(redis_client, group) == expected_order(redis_client, users)


def test_build_and_updates_survive_script_flush(db, redis_client):
    """NOSCRIPT (restart, failover) in the build's MULTI or the upsert pipeline is recovered from."""
    group, users = make_group("g", 3)
    redis_client.script_flush()
    assert groups.members_page(group.pk, 0, 10).count == 3
    redis_client.script_flush()
    record(users[2], NOW)
    assert view(redis_client, group)[0] == (users[2], NOW)
