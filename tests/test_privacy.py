"""Erase and export one user everywhere, against the real Redis and database.

Every entry point (API, management command, admin action, deletion of the Django user) leaves no
trace of the id in any key or table (tests/traces.py), except inside HyperLogLog registers and the
tombstone, as docs/privacy.md says; a flush racing the erase and late events cannot bring the user
back; the work is bounded by the retention settings, not by the number of users.
"""

from __future__ import annotations

import secrets
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command
from django.urls import reverse

from activity import clock
from activity.admin import rows as admin_module
from activity.calendar import PERIODS, day_name, day_of, name_of, period_name
from activity.errors import StoreUnavailable
from activity.events import Event
from activity.models import UserActivity
from activity.services import flush, groups, ingest, privacy, reports, sessions
from activity.services.flush import batch_claimed
from activity.store import audience as audience_store
from activity.store import keys, lifetimes
from activity.store.flush import FlushQueue
from activity.store.last_seen import partition_of
from activity.tasks import erase_user
from tests.clients import APIClient
from tests.last_seen_state import stored
from tests.redis_counts import CommandDelta
from tests.traces import database_traces, dense_id, redis_traces

pytestmark = pytest.mark.django_db
GONE = "erase-me.7f3a"  # an id no other cell or key can spell by chance


def clock_day() -> str:
    return day_name(day_of(clock.now()))


def today_iso() -> str:
    return day_of(clock.now()).isoformat()


def seed(user: str, name: str | None = None, group: Group | None = None) -> None:
    """Everything a user leaves: last seen (dirty), a session of two pages (a transition), page
    statistics and rankings under two names (a rename), a visit, active days, a group view."""
    now = clock.now()
    ingest.record_events([Event(user=user, ts=now - 5, path="/pricing")], names={user: f"{name}-old"} if name else None)
    ingest.record_events([Event(user=user, ts=now, path="/checkout")], names={user: name} if name else None)
    ingest.record_events([Event(user="bystander", ts=now, path="/pricing")])
    if group is not None:
        groups.members_page(group.pk, 0, 10)


def assert_no_trace(user: str, tables: bool = True) -> None:
    assert redis_traces(user) == []
    if tables:
        assert database_traces(user) == []
    assert not UserActivity.objects.filter(user_id=user).exists()


def test_seed_leaves_traces_everywhere_the_finder_looks(redis_client):
    seed(GONE, name="gone")
    flush.flush()
    found = "\n".join(redis_traces(GONE))
    for where in (partition_of(GONE).seen, ":session:", ":viewer:", ":top:", ":byname-pending:"):
        assert where in found, where
    assert redis_client.hexists(keys.viewer(GONE), f"{keys.VIEWER_FORMER}gone-old")  # the rename's former name
    assert database_traces(GONE) == ["activity_useractivity"]
    reports.refresh()  # the by-name entries move from the pending sets into the indexes
    found = "\n".join(redis_traces(GONE))
    assert ":byname:" in found and ":byname-pending:" not in found


@pytest.mark.parametrize("merged", [False, True], ids=["entries pending", "entries merged"])
def test_no_merge_after_an_erase_brings_the_user_back(redis_client, merged):
    """The erase removes the user's by-name entries from the pending sets as from the indexes (one
    atomic script each), so a merge running after it has nothing of theirs to move."""
    seed(GONE, name="gone")
    if merged:
        reports.refresh()
    held = [trace.split(": ")[0].rsplit(":", 2)[0] for trace in redis_traces(GONE) if ":byname" in trace]
    assert held == [f"{keys.prefix()}{{pv}}:{'byname' if merged else 'byname-pending'}"] * 2  # day and week
    privacy.erase(GONE)
    reports.refresh()  # drains what is pending
    for period in ("day", "week"):
        found, cache = reports.page("active-by-name", period)
        assert cache == "hit" and [row["user"] for row in found.rows] == ["bystander"]
    assert_no_trace(GONE)


def test_an_erase_finds_what_a_past_day_holds_under_a_former_name(redis_client):
    """A rename replaces the user's by-name entries of the view's day and week only; the day before
    still holds the one under the former name, which the views hash remembers for the erase."""
    now = clock.now()
    before = now - 2 * 86400
    ingest.record_events([Event(user=GONE, ts=before, path="/a")], names={GONE: "before"})
    ingest.record_events([Event(user=GONE, ts=now, path="/b")], names={GONE: "after"})
    pending = keys.viewers_by_name_pending(period_name("day", day_of(before)))
    assert redis_client.sismember(pending, f"before\0{GONE}")
    privacy.erase(GONE)
    assert not redis_client.sismember(pending, f"before\0{GONE}")
    assert_no_trace(GONE)


def test_an_earlier_releases_set_of_former_names_is_erased_and_exported_until_it_expires(redis_client):
    """Releases before the views hash's former-name fields kept them in a set of their own, for up to
    15 days: an erase finds the by-name entries made under them and deletes the set, an export lists
    them."""
    seed(GONE, name="gone")
    period = period_name("day", day_of(clock.now()))
    redis_client.sadd(keys.former_display_aliases(GONE), "ancient")
    redis_client.zadd(keys.viewers_by_name(period), {f"ancient\0{GONE}": 0})
    assert privacy.export(GONE)["former_names"] == ["ancient", "gone-old"]
    privacy.erase(GONE)
    assert redis_client.zscore(keys.viewers_by_name(period), f"ancient\0{GONE}") is None
    assert_no_trace(GONE)


# --- the four entry points ------------------------------------------------------------------


def test_api_delete_erases_everywhere_and_answers_204(staff_api, redis_client):
    seed(GONE, name="gone")
    flush.flush()
    response = staff_api.delete(f"/api/v1/users/{GONE}/activity/")
    assert response.status_code == 204 and response.content == b""
    assert_no_trace(GONE)
    assert ingest.record_events([Event(user="bystander", ts=clock.now())]).accepted == 1
    assert "bystander" in stored(redis_client)  # others untouched


def test_an_erase_takes_the_users_throttle_counters_too(member, member_api, staff_api, redis_client):
    member_api.get(f"/api/v1/users/{member.pk}/last-seen/")  # a request: the member's counter
    assert any("throttle counter" in trace for trace in redis_traces(str(member.pk)))
    assert staff_api.delete(f"/api/v1/users/{member.pk}/activity/").status_code == 204
    assert_no_trace(str(member.pk), tables=False)


def test_api_delete_needs_the_erase_permission_validates_and_404s_the_unknown(
    member, member_api, staff_api, redis_client
):
    seed(GONE)
    assert APIClient().delete(f"/api/v1/users/{GONE}/activity/").status_code == 401
    assert member_api.delete(f"/api/v1/users/{GONE}/activity/").status_code == 403
    assert member_api.delete(f"/api/v1/users/{member.pk}/activity/").status_code == 403  # not even one's own
    bad = staff_api.delete("/api/v1/users/a*b/activity/")
    assert bad.status_code == 400 and "user" in bad.json()
    assert staff_api.delete(f"/api/v1/users/{'x' * 65}/activity/").status_code == 400
    unknown = staff_api.delete("/api/v1/users/never-seen/activity/")
    assert unknown.status_code == 404 and "detail" in unknown.json()
    assert redis_traces(GONE) != []  # none of those erased anything
    assert redis_client.zscore(partition_of("never-seen").tombstones, "never-seen") is None  # nor tombstoned


def test_management_command_erases_and_refuses_bad_or_unknown_ids_before_anything(redis_client):
    seed(GONE)
    seed("other-user")
    for args, message in ((["a b", GONE], "invalid"), ([GONE, "never-seen"], "unknown")):
        with pytest.raises(CommandError, match=message):
            call_command("activity_erase", *args)
        assert redis_traces(GONE) != []  # nothing erased
    out = StringIO()
    call_command("activity_erase", GONE, "other-user", stdout=out)
    assert f"{GONE}: erased" in out.getvalue() and "other-user: erased" in out.getvalue()
    assert_no_trace(GONE)
    assert_no_trace("other-user")


def test_admin_action_erases_the_selected_users_once_confirmed_for_staff_with_the_erase_permission(
    admin_client, redis_client
):
    seed(GONE)
    seed("keep-me")
    flush.flush()
    url = reverse("admin:activity_useractivity_changelist")
    chosen = {"action": "erase_activity", "_selected_action": [GONE]}
    asked = admin_client.post(url, chosen)
    page = asked.content.decode()
    assert asked.status_code == 200 and "cannot be undone" in page and f"<li>{GONE}</li>" in page
    assert 'name="post" value="yes"' in page and f'name="_selected_action" value="{GONE}"' in page
    assert redis_traces(GONE) != [] and UserActivity.objects.filter(user_id=GONE).exists()  # nothing yet
    response = admin_client.post(url, {**chosen, "post": "yes"}, follow=True)
    assert response.status_code == 200 and "Erased 1 users" in response.content.decode()
    assert_no_trace(GONE)
    assert UserActivity.objects.filter(user_id="keep-me").exists()

    clerk = get_user_model().objects.create_user("clerk", is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename="view_activity"))
    browser = type(admin_client)()
    browser.force_login(clerk)
    assert "erase_activity" not in browser.get(url).content.decode()  # no erase permission: no action
    browser.post(url, {"action": "erase_activity", "_selected_action": ["keep-me"], "post": "yes"})
    assert UserActivity.objects.filter(user_id="keep-me").exists()


def test_the_admin_action_refuses_more_users_than_it_erases_at_once_and_erases_none(
    admin_client, redis_client, monkeypatch
):
    monkeypatch.setattr(admin_module, "ERASE_PER_ACTION", 2)
    for user in (GONE, "keep-me", "keep-me-too"):
        seed(user)
    flush.flush()
    url = reverse("admin:activity_useractivity_changelist")
    every = {"action": "erase_activity", "select_across": "1", "_selected_action": [GONE], "post": "yes"}
    response = admin_client.post(url, every, follow=True)
    assert "Select at most 2 users per erase" in response.content.decode()
    assert UserActivity.objects.count() >= 3 and redis_traces(GONE) != []


def test_deleting_a_django_user_erases_them_once_the_deletion_commits(redis_client, django_capture_on_commit_callbacks):
    account = get_user_model().objects.create_user("leaving")
    group = Group.objects.create(name="team")
    with django_capture_on_commit_callbacks(execute=True):
        group.user_set.add(account)
    user = str(account.pk)
    seed(user, name="leaving", group=group)
    flush.flush()
    assert redis_client.getbit(keys.active_bits(clock_day()), dense_id(redis_client, user)) == 1
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        account.delete()
    assert callbacks  # the erase waited for the commit
    assert_no_trace(user, tables=False)
    assert redis_client.zcard(keys.group_view(group.pk)) == 0  # rebuilt without them at the next read
    assert groups.members_page(group.pk, 0, 10).count == 0


def test_a_deletion_while_redis_is_down_queues_the_erase_task(monkeypatch, django_capture_on_commit_callbacks):
    account = get_user_model().objects.create_user("leaving-later")
    user = str(account.pk)
    seed(user)
    erase, sent = privacy.erase, []

    def redis_down(user: str) -> None:
        raise StoreUnavailable("connection", "refused")

    monkeypatch.setattr(privacy, "erase", redis_down)
    monkeypatch.setattr(privacy.current_app, "send_task", lambda name, args: sent.append((name, args)))
    with django_capture_on_commit_callbacks(execute=True):
        account.delete()
    assert sent == [("activity.erase_user", [user])]
    monkeypatch.setattr(privacy, "erase", erase)  # Redis is back: the task runs
    assert erase_user(user)["traces"] > 0
    assert_no_trace(user, tables=False)


# --- the flush race and late events ---------------------------------------------------------


def test_erase_during_a_claimed_flush_batch_cannot_bring_the_user_back(redis_client):
    seed(GONE)
    others = [f"u{n}" for n in range(5)]
    ingest.record_events([Event(user=user, ts=clock.now()) for user in others])
    erased = []

    def erase_now(sender, batch, size, **kwargs):  # the batch is claimed, not yet written
        if not erased:
            erased.append(privacy.erase(GONE))

    batch_claimed.connect(erase_now, dispatch_uid="test.erase_now")
    try:
        result = flush.flush()
    finally:
        batch_claimed.disconnect(dispatch_uid="test.erase_now")
    assert erased and result.flushed == len(others) + 2  # GONE and the bystander were in the batch
    assert_no_trace(GONE)
    assert set(UserActivity.objects.values_list("user_id", flat=True)) == {*others, "bystander"}
    assert len(stored(redis_client, "claimed")) == 0


def test_a_flush_killed_between_its_write_and_its_ack_is_settled_by_the_next(redis_client, monkeypatch):
    seed(GONE)
    queue = FlushQueue(redis_client)
    claim = queue.claim(clock.now(), 100)
    UserActivity.objects.build_upsert(claim.rows).execute()  # written, then the worker dies: no ack
    privacy.erase(GONE)  # its row is deleted here, but the dead flush's claim is still pending
    UserActivity.objects.build_upsert(claim.rows).execute()  # (as if its commit landed after the erase)
    assert UserActivity.objects.filter(user_id=GONE).exists()
    assert queue.ack(claim.claim_time, [GONE], clock.now()) == (0, [GONE])  # an ack would report it
    later = clock.now() + 61  # past the job lock's TTL: the reaper hands the claim back
    monkeypatch.setattr(clock, "now", lambda: later)
    flush.flush()
    assert_no_trace(GONE)


def test_late_events_are_skipped_while_tombstoned_and_recorded_after(redis_client, monkeypatch):
    seed(GONE, name="gone")
    privacy.erase(GONE)
    now = clock.now()
    late = ingest.record_events([Event(user=GONE, ts=now, path="/again")], visitors=[(secrets.token_hex(16), now)])
    assert late.last_seen_updated == 0 and late.sessions_started == 0
    assert_no_trace(GONE)
    expiry = redis_client.zscore(partition_of(GONE).tombstones, GONE)
    assert expiry == pytest.approx(now + privacy.tombstone_ttl(), abs=5)
    assert redis_client.ttl(keys.tombstones("pv")) > 0  # bounded: the set goes with its last tombstone
    monkeypatch.setattr(clock, "now", lambda: expiry + 1)
    assert ingest.record_events([Event(user=GONE, ts=expiry + 1, path="/back")]).last_seen_updated == 1
    assert sessions.page(GONE) is not None


def test_a_batch_skips_only_the_tombstoned_users_views(redis_client):
    seed(GONE, name="gone")
    privacy.erase(GONE)
    now = clock.now()
    users = [GONE, "kept-1", GONE, "kept-2", "kept-1", GONE]
    paths = [f"/p{index}" for index in range(len(users))]
    views_before = sessions.page_views(day_of(now))
    recorded = ingest.record_events(
        [Event(user=user, ts=now, path=path) for user, path in zip(users, paths, strict=True)]
    )
    assert recorded.sessions_started == 2
    assert_no_trace(GONE)
    for user in ("kept-1", "kept-2"):
        own = [path for who, path in zip(users, paths, strict=True) if who == user]
        assert [path for path, _ in sessions.current(user)] == own[::-1]
        assert redis_client.hget(keys.viewer(user), period_name("day", day_of(now))) == str(len(own))
    # The page counts too, in whichever partition of the paths each view falls.
    assert sessions.page_views(day_of(now)) == views_before + 3
    assert {path for path, _ in sessions.top_paths(day_of(now), 10)} >= {"/p1", "/p3", "/p4"}
    assert not {"/p0", "/p2", "/p5"} & {path for path, _ in sessions.top_paths(day_of(now), 10)}


def test_the_tombstone_outlives_a_dead_flush_claim_however_short_it_is(monkeypatch):
    monkeypatch.setattr(privacy, "TOMBSTONE_TTL", 1)
    assert privacy.tombstone_ttl() >= 2 * 60 + 10  # two job-lock TTLs and a flush interval


# --- bounded cost ---------------------------------------------------------------------------


def test_export_and_erase_find_the_visitor_in_an_older_generation_and_the_legacy_hash(redis_client, monkeypatch):
    """The user's first visit is in the hash of the generation of their last visit (here an older,
    still live one) and, from a release before generations, maybe in the legacy hash: the export
    shows it and the erase removes it from both."""
    then = clock.now()
    ingest.record_events([Event(user=GONE, ts=then)])
    later = then + (lifetimes.VISITORS.days + 10) * 86400
    monkeypatch.setattr(clock, "now", lambda: later)
    for period, bitmap in zip(PERIODS, audience_store.BITS, strict=True):  # long expired by ``later``
        redis_client.delete(bitmap(name_of(period, day_of(then))))
    visitor = audience_store.user_visitor_id(GONE)
    hashes, _ = audience_store.visitor_home(visitor, day_of(later))
    assert redis_client.hget(hashes[0], visitor) is None  # not in the current generation
    redis_client.hset(hashes[-1], visitor, 1)  # and in the legacy hash, as if left by an old release
    assert privacy.export(GONE)["first_visit"] == day_of(then).isoformat()
    privacy.erase(GONE)
    assert_no_trace(GONE, tables=False)
    assert privacy.export(GONE) is None  # nothing left to export


def erase_commands(redis_client, bystanders: int) -> int:
    user = f"bounded-{bystanders}"
    seed(user)
    now = clock.now()
    for start in range(0, bystanders, 1000):
        ingest.record_events(
            [Event(user=f"b{n}", ts=now, path=f"/p{n % 7}") for n in range(start, min(start + 1000, bystanders))]
        )
    privacy.erase("warm-up")  # scripts loaded
    with CommandDelta(redis_client) as delta:
        privacy.erase(user)
    return sum(delta.calls.values())


def test_an_erase_costs_the_same_commands_whatever_the_number_of_users(redis_client):
    """About 700 commands either way. They are counted off the servers, where a cluster run saw two
    more once (another test's client still about); an erase that grew with the users would send
    thousands more for 3,000 of them."""
    assert erase_commands(redis_client, 10) == pytest.approx(erase_commands(redis_client, 3000), abs=3)


# --- export ---------------------------------------------------------------------------------


def test_export_holds_everything_stored_about_the_user(member, member_api, redis_client):
    user = str(member.pk)
    group = Group.objects.create(name="readers")
    member.groups.add(group)
    seed(user, name="member", group=group)
    flush.flush()
    body = member_api.get(f"/api/v1/users/{user}/activity/export/").json()
    assert body["user"] == user and body["last_seen"]["ts"] == pytest.approx(clock.now(), abs=60)
    assert body["last_seen"]["unflushed_since"] is None  # flushed
    assert [page["path"] for page in body["session"]["pages"]] == ["/pricing", "/checkout"]
    assert body["display_name"] == "member" and body["former_names"] == ["member-old"]
    assert sorted(row["period"] for row in body["page_views"]) == ["day", "week"]
    assert {row["views"] for row in body["page_views"]} == {2}
    assert body["groups"] == [group.pk]
    assert body["active_days"] == [today_iso()]
    assert body["dense_id"] == dense_id(redis_client, user) >= 1
    assert body["first_visit"] == body["first_active"] == body["active_days"][0]
    assert body["database"]["user_id"] == user and body["database"]["account"] == user
    assert body["erased_until"] is None


def test_export_permissions_and_bad_input(member, member_api, staff_api, redis_client):
    seed(GONE)
    assert member_api.get(f"/api/v1/users/{GONE}/activity/export/").status_code == 403  # another's
    assert APIClient().get(f"/api/v1/users/{GONE}/activity/export/").status_code == 401
    assert staff_api.get(f"/api/v1/users/{GONE}/activity/export/").json()["active_days"] == [today_iso()]
    assert staff_api.get("/api/v1/users/a*b/activity/export/").status_code == 400
    assert staff_api.get("/api/v1/users/never-seen/activity/export/").status_code == 404
    own = f"/api/v1/users/{member.pk}/activity/export/"
    assert member_api.get(own).status_code == 404  # a Django account, but no activity: nothing stored
    seed(str(member.pk))
    assert member_api.get(own).status_code == 200
    privacy.erase(GONE)
    erased = staff_api.get(f"/api/v1/users/{GONE}/activity/export/")
    assert erased.status_code == 404 and erased.json() == {"detail": "No activity of this user is stored."}
    privacy.erase(str(member.pk))  # an erased Django user keeps the account: still nothing stored
    assert member_api.get(own).status_code == 404


def test_the_openapi_document_describes_both_operations(staff_api):
    schema = staff_api.get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    erase_op = schema["paths"]["/api/v1/users/{user}/activity/"]["delete"]
    assert {"204", "400", "403", "404"} <= set(erase_op["responses"])
    export_op = schema["paths"]["/api/v1/users/{user}/activity/export/"]["get"]
    assert {"200", "400", "403", "404"} <= set(export_op["responses"])
