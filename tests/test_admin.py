"""The admin: dashboard (figures = the stats API, bounded cost, staff only), the user activity
changelist (filters, search, sorting, bounded queries), a user's live page, and the two actions
queued on a real Celery worker."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, date, datetime, timedelta

import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from activity import clock
from activity.admin import figures as dashboard_figures
from activity.events import Event
from activity.models import DailyRollup, UserActivity
from activity.services import flush, groups, ingest, last_seen, reports, sessions
from tests.celery_procs import wait_for, worker
from tests.clients import Client
from tests.redis_counts import CommandDelta
from tests.redis_probe import probe

NOON = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()  # a Wednesday
DASHBOARD = reverse("admin:activity-dashboard")
PANEL = reverse("admin:activity-dashboard-panel")
FLUSH = reverse("admin:activity-dashboard-flush")
REBUILD = reverse("admin:activity-dashboard-rebuild")
FIGURE_RE = re.compile(r'data-figure="([a-z_.]+)">([0-9.]+)')
STATS_FIGURES = ("online", "active.day", "active.week", "active.month", "new_visitors.day", "unique_visitors.day")


@pytest.fixture
def noon(monkeypatch):
    monkeypatch.setattr(clock, "now", lambda: NOON)
    return NOON


def figures(html: str) -> dict[str, str]:
    return dict(FIGURE_RE.findall(html))


def api_figure(body: dict, dotted: str) -> str:
    for part in dotted.split("."):
        body = body[part]
    return str(body)


def broker() -> redis.Redis:
    """Celery's broker and results: a database of their own beside the store's (project/settings.py)."""
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


def queued() -> int:
    """Messages waiting in this run's Celery queue."""
    with broker() as client:
        return client.llen(settings.CELERY_TASK_DEFAULT_QUEUE)


def record_traffic(users: int, ts: float) -> Counter:
    """``users`` users (ids from 1001, clear of the admin's own id) with a page view each, and three
    anonymous visitors; returns the views per path."""
    events = [Event(user=str(1000 + n), ts=ts - n % 200, path=f"/page/{n * n % 7}") for n in range(1, users + 1)]
    for start in range(0, len(events), 1000):
        ingest.record_events(events[start : start + 1000])
    ingest.record_events([], visitors=[(f"{n:032x}", ts) for n in range(1, 4)])
    return Counter(event.path for event in events)


# --- access -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_dashboard_is_linked_from_the_admin_index(admin_client):
    index = admin_client.get(reverse("admin:index")).content.decode()
    assert f'href="{DASHBOARD}"' in index
    assert "Activity dashboard" in index


@pytest.mark.django_db
def test_anonymous_and_non_staff_are_sent_to_login_and_nothing_is_queued(member, redis_client):
    signed_in = Client()
    signed_in.force_login(member)
    for client in (Client(), signed_in):
        for url, method in ((DASHBOARD, "get"), (PANEL, "get"), (FLUSH, "post"), (REBUILD, "post")):
            response = getattr(client, method)(url)
            assert response.status_code == 302, url
            assert response["Location"].startswith(f"{reverse('admin:login')}?next="), url
    assert queued() == 0


@pytest.mark.django_db
def test_staff_without_the_dashboard_permissions_are_refused_and_nothing_is_queued():
    from django.contrib.auth.models import Permission

    staff = get_user_model().objects.create_user("plainstaff", is_staff=True)
    client = Client()
    client.force_login(staff)
    for url, method in ((DASHBOARD, "get"), (PANEL, "get"), (FLUSH, "post"), (REBUILD, "post")):
        assert getattr(client, method)(url).status_code == 403, url
    assert f'href="{DASHBOARD}"' not in client.get(reverse("admin:index")).content.decode()

    staff.user_permissions.add(Permission.objects.get(codename="view_activity"))
    staff = get_user_model().objects.get(pk=staff.pk)  # a fresh permission cache
    client.force_login(staff)
    page = client.get(DASHBOARD)
    assert page.status_code == 200 and client.get(PANEL).status_code == 200
    assert "activity-flush-now" not in page.content.decode()  # no buttons it may not press
    assert client.post(FLUSH).status_code == 403 and client.post(REBUILD).status_code == 403
    assert queued() == 0

    staff.user_permissions.add(Permission.objects.get(codename="run_jobs"))
    client.force_login(get_user_model().objects.get(pk=staff.pk))
    assert "activity-flush-now" in client.get(DASHBOARD).content.decode()
    assert client.post(FLUSH).status_code == 302
    assert queued() == 1
    with broker() as client:
        client.delete(settings.CELERY_TASK_DEFAULT_QUEUE)  # this run's own queue: no worker takes it


@pytest.mark.django_db
def test_actions_only_accept_post(admin_client, redis_client):
    assert admin_client.get(FLUSH).status_code == 405
    assert admin_client.get(REBUILD).status_code == 405
    assert queued() == 0


# --- the dashboard's figures --------------------------------------------------------------------


@pytest.mark.django_db
def test_dashboard_and_panel_show_the_stats_api_figures(noon, admin_client):
    record_traffic(40, NOON)
    admin_client.get(reverse("activity:stats"))  # the admin's own first request counts them in too
    page = admin_client.get(DASHBOARD)
    assert page.status_code == 200
    api = admin_client.get(reverse("activity:stats")).json()
    shown = figures(page.content.decode())
    for name in STATS_FIGURES:
        assert shown[name] == api_figure(api, name), name
    assert (shown["online"], shown["active.day"], shown["new_visitors.day"]) == ("41", "41", str(41 + 3))
    panel = admin_client.get(PANEL)
    assert panel["Content-Type"] == "application/json"
    assert {name: figures(panel.json()["html"])[name] for name in STATS_FIGURES} == {
        name: shown[name] for name in STATS_FIGURES
    }


@pytest.mark.django_db
def test_dashboard_shows_rollups_today_live_top_pages_report_and_flush(noon, admin_client):
    today = date(2026, 11, 25)
    DailyRollup.objects.create(day=today - timedelta(days=1), active_users=17, page_views=230)
    DailyRollup.objects.create(day=today - timedelta(days=29), active_users=5, page_views=9)
    DailyRollup.objects.create(day=today - timedelta(days=30), active_users=999, page_views=999)  # out of range
    paths = record_traffic(40, NOON)
    html = admin_client.get(DASHBOARD).content.decode()
    bars = re.findall(r'data-value="(\d*)" data-day="([0-9-]+)"', html)
    assert len(bars) == 2 * dashboard_figures.DAYS
    active = {day: value for value, day in bars[: dashboard_figures.DAYS]}
    views = {day: value for value, day in bars[dashboard_figures.DAYS :]}
    assert (active["2026-11-24"], views["2026-11-24"]) == ("17", "230")
    assert (active["2026-10-27"], views["2026-10-27"]) == ("5", "9")
    assert (active["2026-11-25"], views["2026-11-25"]) == ("40", "40")  # today: live
    assert active["2026-11-20"] == ""  # no rollup row: drawn hollow, not as zero
    assert "2026-10-26" not in active
    top = re.search(r'id="activity-top-paths".*?</table>', html, re.S).group(0)
    expected = sorted(paths.items(), key=lambda item: (item[1], item[0]), reverse=True)
    assert re.findall(r"<td>(/page/\d)</td><td>(\d+)</td>", top) == [(path, str(n)) for path, n in expected]
    most_active = re.search(r'id="activity-most-active".*?</table>', html, re.S).group(0)
    assert most_active.count("<tr>") == 1 + 10  # header + the report's first ten rows
    assert re.search(r'data-figure="flush.backlog">40<', html)


@pytest.mark.django_db
def test_dashboard_cost_does_not_grow_with_users(noon, admin_client, redis_client):
    def cost() -> tuple[int, int]:
        admin_client.get(DASHBOARD)  # warm: the report's copy and the week/month unions exist
        with probe(redis_client) as seen, CaptureQueriesContext(connection) as queries:
            assert admin_client.get(DASHBOARD).status_code == 200
        return seen.client_sends, len(queries)

    record_traffic(10, NOON)
    small = cost()
    record_traffic(5000, NOON)
    assert cost() == small
    # Redis: stats, today's page views, top pages, where people went next, the report's page, flush
    # status, pages now, the retention heatmap's cached table, the tracking of this request. Queries: the
    # session, the user, the rollup rows, the groups (none here, so no round trip for their counts),
    # the retention picker's groups, the funnels (none here: a round trip and a query each).
    assert small == (9, 6)


def heatmap_cells(html: str) -> dict[tuple[str, int], str]:
    table = re.search(r'id="activity-retention".*?</svg>', html, re.S).group(0)
    return {
        (cohort, int(k)): count
        for cohort, k, count in re.findall(r'data-cohort="([\d-]+)" data-k="(\d+)" data-count="(\d*)"', table)
    }


@pytest.mark.django_db
def test_dashboard_heatmap_shows_the_retention_api_table_and_its_group_picker(noon, admin_client):
    crew = Group.objects.create(name="crew")
    User = get_user_model()
    User.objects.bulk_create(User(pk=pk, username=f"c{pk}") for pk in (3001, 3002))
    crew.user_set.add(3001)
    groups.rebuild_memberships()
    ingest.record_events([Event("3001", NOON - 86_400), Event("3002", NOON - 86_400), Event("3001", NOON)])
    for query, picked in (("", {}), (f"?group={crew.pk}&period=week", {"group": crew.pk, "period": "week"})):
        page = admin_client.get(DASHBOARD + query).content.decode()
        size = 14 if picked.get("period", "day") == "day" else 12
        api = admin_client.get(
            reverse("activity:retention"), {"cohorts": size, "periods": size, "by": "first_seen", **picked}
        ).json()
        expected = {
            (row["start"], k): "" if count is None else str(count)
            for row in api["cohorts"]
            for k, count in enumerate(row["retained"])
        }
        assert heatmap_cells(page) == expected
    day_page = heatmap_cells(admin_client.get(DASHBOARD).content.decode())
    assert day_page[("2026-11-24", 0)] == "2" and day_page[("2026-11-24", 1)] == "1"


def make_groups(count: int, active_users: int, ts: float) -> list[Group]:
    """``count`` groups; group n has n + 1 members, the first ``min(n + 1, active_users)`` of them
    active at ``ts`` (ids from 2001, clear of the admin's own)."""
    User = get_user_model()
    users = User.objects.bulk_create(User(pk=2000 + n, username=f"m{n}") for n in range(1, count + 2))
    Group.objects.bulk_create(Group(name=f"group {n:03}") for n in range(count))
    made = list(Group.objects.filter(name__startswith="group ").order_by("pk"))
    through = User.groups.through
    through.objects.bulk_create(
        through(group_id=group.pk, user_id=user.pk) for n, group in enumerate(made) for user in users[: n + 1]
    )
    groups.rebuild_memberships()
    ingest.record_events([Event(user=str(user.pk), ts=ts) for user in users[:active_users]])
    return made


def top_groups(html: str) -> list[tuple[str, str, str, str]]:
    table = re.search(r'id="activity-top-groups".*?</table>', html, re.S).group(0)
    return re.findall(
        r'<tr data-group="(\d+)"><td>([^<]*)</td><td data-figure="group.active">(\d+)</td>'
        r'<td data-figure="group.members">(\d+)</td></tr>',
        table,
    )


@pytest.mark.django_db
def test_dashboard_shows_the_top_groups_by_members_active_today_as_the_api_counts_them(noon, admin_client):
    made = make_groups(14, active_users=9, ts=NOON)
    yesterday = NOON - 86400
    ingest.record_events([Event(user=str(2000 + n), ts=yesterday) for n in range(9, 16)])  # this week only
    html = admin_client.get(DASHBOARD).content.decode()
    shown = top_groups(html)
    assert len(shown) == dashboard_figures.TOP_GROUPS  # 14 groups, the top 10 shown
    # Most active first; among groups with all 9 active members, the larger first.
    assert [name for _, name, _, _ in shown] == [f"group {n:03}" for n in (13, 12, 11, 10, 9, 8, 7, 6, 5, 4)]
    for group_id, _, active, members in shown:
        body = admin_client.get(reverse("activity:group-active", kwargs={"group_id": group_id})).json()
        assert (body["active"], body["members"], body["period"]) == (int(active), int(members), "day")
    assert {active for _, _, active, _ in shown} == {"9", "8", "7", "6", "5"}
    assert top_groups(admin_client.get(PANEL).json()["html"]) == shown  # the live panel too
    assert "among the first" not in html
    assert made[0].pk not in {int(group_id) for group_id, _, _, _ in shown}


@pytest.mark.django_db
def test_top_groups_cost_is_bounded_whatever_the_number_of_groups(noon, admin_client, redis_client, monkeypatch):
    monkeypatch.setattr(groups, "TOP_SCAN", 20)

    def cost() -> tuple[int, int, int]:
        admin_client.get(DASHBOARD)
        with probe(redis_client) as seen, CaptureQueriesContext(connection) as queries:
            html = admin_client.get(DASHBOARD).content.decode()
        return seen.client_sends, len(queries), len(re.findall(r"<tr data-group=", html))

    made = make_groups(25, active_users=26, ts=NOON)
    assert cost() == (10, 6, 10)  # one more round trip, for the groups
    with CommandDelta(redis_client) as delta:
        groups.top_active_today()
    assert (delta.calls["evalsha"], delta.calls["bitop"]) == (20, 20)  # one bounded AND per group looked at
    html = admin_client.get(DASHBOARD).content.decode()
    assert "among the first 20 groups by id" in html
    # Only the first 20 groups are looked at: the largest five (ids beyond) are not shown.
    assert {int(group_id) for group_id, _, _, _ in top_groups(html)} == {group.pk for group in made[10:20]}


@pytest.mark.django_db
def test_panel_poll_is_activity_but_not_a_page_view(admin_client, admin_user):
    admin_client.get(DASHBOARD)
    admin_client.get(PANEL)
    views = [path for path, _ in sessions.current(str(admin_user.pk))]
    assert views == [DASHBOARD]
    assert last_seen.get(str(admin_user.pk)) is not None


# --- the user activity changelist ---------------------------------------------------------------


DAYS_60 = timedelta(days=60)


def make_rows(count: int, start: int = 1) -> None:
    users = get_user_model().objects.bulk_create(
        [get_user_model()(username=f"user{n}", email=f"user{n}@example.com") for n in range(start, start + count)]
    )
    now = datetime.fromtimestamp(NOON, UTC)
    UserActivity.objects.bulk_create(
        [
            UserActivity(
                user_id=str(user.pk), account=user, first_seen=now - DAYS_60, last_seen=now - timedelta(hours=n)
            )
            for n, user in enumerate(users)
        ]
    )


@pytest.mark.django_db
def test_changelist_queries_and_redis_round_trips_do_not_grow_with_rows(noon, admin_client, redis_client):
    url = reverse("admin:activity_useractivity_changelist")

    def cost() -> tuple[int, int]:
        with probe(redis_client) as seen, CaptureQueriesContext(connection) as queries:
            response = admin_client.get(url)
        assert response.status_code == 200
        return len(queries), seen.client_sends

    make_rows(3)
    admin_client.get(url)  # the process warmed: scripts loaded, the funnels' definitions read
    few = cost()
    make_rows(300, start=100)
    many = cost()
    assert many == few
    assert few[0] <= 6 and few[1] <= 2  # session, user, count, rows (with their Django users); one ZMSCORE


@pytest.mark.django_db
def test_changelist_bounded_queries_whatever_the_filter(noon, admin_client, django_assert_max_num_queries):
    make_rows(250)
    for query in ("", "?seen=online", "?seen=today", "?seen=week", "?seen=dormant", "?q=user7", "?o=-3"):
        with django_assert_max_num_queries(6):
            assert admin_client.get(reverse("admin:activity_useractivity_changelist") + query).status_code == 200


def shown_users(admin_client, query: str) -> list[str]:
    html = admin_client.get(reverse("admin:activity_useractivity_changelist") + query).content.decode()
    return re.findall(r'<th class="field-user_id"><a href="[^"]+">([^<]+)</a>', html)


@pytest.mark.django_db
def test_changelist_filters_search_and_sorting(noon, admin_client):
    now = datetime.fromtimestamp(NOON, UTC)
    ages = {"a": timedelta(seconds=30), "b": timedelta(hours=3), "c": timedelta(days=2), "d": timedelta(days=31)}
    for user, age in ages.items():
        UserActivity.objects.create(user_id=user, first_seen=now - timedelta(days=90), last_seen=now - age)
    assert shown_users(admin_client, "") == ["a", "b", "c", "d"]  # most recently seen first
    assert shown_users(admin_client, "?seen=online") == ["a"]
    assert shown_users(admin_client, "?seen=today") == ["a", "b"]
    assert shown_users(admin_client, "?seen=week") == ["a", "b", "c"]  # Monday 23 Nov onwards
    assert shown_users(admin_client, "?seen=dormant") == ["d"]
    assert shown_users(admin_client, "?q=c") == ["c"]
    # Column 3 is last seen (the erase action's checkboxes are column 1): oldest first.
    assert shown_users(admin_client, "?o=3") == ["d", "c", "b", "a"]


@pytest.mark.django_db
def test_search_finds_the_django_username(noon, admin_client):
    make_rows(3)
    account = get_user_model().objects.get(username="user2")
    assert shown_users(admin_client, "?q=user2") == [str(account.pk)]


@pytest.mark.django_db
def test_user_page_shows_live_session_and_last_seen_from_redis(admin_client):
    now = clock.now()
    ingest.record_events([Event("u-7", now - 20, "/shop/"), Event("u-7", now - 5, "/cart/")])
    flush.flush()
    ingest.record_events([Event(user="u-7", ts=now, path="/checkout/")])  # not flushed yet: live only
    row = UserActivity.objects.get(user_id="u-7")
    html = admin_client.get(reverse("admin:activity_useractivity_change", args=[row.pk])).content.decode()
    assert re.findall(r"<td>[0-9:]+</td><td>(/[a-z]+/)</td>", html) == ["/checkout/", "/cart/", "/shop/"]
    live = f"{datetime.fromtimestamp(round(now, 3), UTC):%Y-%m-%d %H:%M:%S} UTC (online)"
    assert live in html
    assert row.last_seen.timestamp() == pytest.approx(now - 5, abs=0.001)


@pytest.mark.django_db
def test_rows_are_read_only(admin_client):
    row = UserActivity.objects.create(user_id="x", first_seen=datetime.now(UTC), last_seen=datetime.now(UTC))
    assert admin_client.get(reverse("admin:activity_useractivity_add")).status_code == 403
    assert admin_client.post(reverse("admin:activity_useractivity_delete", args=[row.pk])).status_code == 403
    assert UserActivity.objects.filter(pk=row.pk).exists()


# --- actions: queued on Celery, run by a real worker --------------------------------------------


def messages_of(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_flush_now_and_recompute_now_run_on_a_real_worker(admin_client, redis_client, tmp_path):
    users = [str(n) for n in range(1001, 1051)]
    ingest.record_events([Event(user=user, ts=clock.now() - 1) for user in users])
    with worker("admin", tmp_path):
        response = admin_client.post(FLUSH, follow=True)
        assert response.redirect_chain[-1][0] == DASHBOARD
        assert any(
            "Flush of last-seen changes to the database queued as Celery task" in m for m in messages_of(response)
        )
        wait_for(lambda: UserActivity.objects.filter(user_id__in=users).count() == 50, 60, "the worker's flush")

        bad = admin_client.post(REBUILD, {"report": "nope", "period": "day"}, follow=True)
        assert any("No report rebuild queued (report:" in m for m in messages_of(bad))
        assert queued() == 0

        before, _ = reports.page("most-active")  # a copy built now, before the recompute
        response = admin_client.post(REBUILD, {"report": "most-active", "period": "day"}, follow=True)
        assert any("Rebuild of report most-active (day) queued" in m for m in messages_of(response))

        def rebuilt() -> bool:
            return reports.page("most-active")[0].generated_at > before.generated_at

        wait_for(rebuilt, 60, "the worker's rebuild")
        with broker() as results_backend:  # CELERY_RESULT_BACKEND: the broker's database
            stored = results_backend.scan_iter(match="celery-task-meta-*")
            results = [json.loads(results_backend.get(key)) for key in stored]
        assert {"report": "most-active", "period": "day", "outcome": "built"} in [r["result"] for r in results]
