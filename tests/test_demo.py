"""``manage.py activity_demo``: its traffic goes through the service's own write path into the
real Redis and database, and every figure the dashboard and the API show is there afterwards
(active users on past days, page views, sessions with next pages, groups with members, bots, API
calls and tokens); a rerun reuses its users; the same seed makes the same traffic. A Redis that
cannot serve leaves the database as it was; the groups count their active members without a
backfill; no cached table or report from before the demo is served after it. And the example
project's front door: ``/`` leads to the dashboard, the admin's "View site" to a page that answers,
``/favicon.ico`` is an icon that counts as no activity."""

from __future__ import annotations

import io
import re
from datetime import UTC, date, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings
from django.urls import reverse
from rest_framework.authtoken.models import Token

from activity import clock, conf
from activity.admin import figures as dashboard_figures
from activity.models import DailyRollup, RetentionCell, UserActivity
from activity.services import demo, groups, last_seen, recommendations, sessions
from project.redis_server import free_port
from tests.clients import APIClient

NOON = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()  # a Wednesday
TODAY = date(2026, 11, 25)
DASHBOARD = reverse("admin:activity-dashboard")
BAR_RE = re.compile(r'data-value="(\d*)" data-day="([0-9-]+)"')


@pytest.fixture
def noon(monkeypatch) -> float:
    """Stop the clock at noon, so a run never straddles midnight."""
    monkeypatch.setattr(clock, "now", lambda: NOON)
    return NOON


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("activity_demo", *args, stdout=out)
    return out.getvalue()


def demo_users():
    return get_user_model().objects.filter(username__startswith=demo.USERNAME_PREFIX)


@pytest.mark.django_db
def test_demo_fills_every_figure_the_dashboard_and_the_api_show(noon, staff_api, admin_client):
    out = run("--users", "40", "--days", "30", "--seed", "7")

    assert re.match(r"activity_demo: 40 users \(40 new\), 3 groups \(\d+ memberships in the bitmaps\), 2 API", out)
    assert f"30 days from {TODAY - timedelta(days=29)} (seed 7)" in out
    users = list(demo_users().order_by("pk"))
    assert len(users) == 40 and not any(user.has_usable_password() for user in users)

    # Past days: a rollup row each, people active on most of them, page views on the days kept.
    rows = {row.day: row for row in DailyRollup.objects.all()}
    assert sorted(rows) == [TODAY - timedelta(days=back) for back in range(29, 0, -1)]
    assert sum(row.active_users > 0 for row in rows.values()) >= 20
    assert sum(row.unique_visitors > row.active_users for row in rows.values()) >= 10  # anonymous visitors too
    kept = [TODAY - timedelta(days=back) for back in range(1, conf.settings.PAGE_STATS_DAYS)]
    assert all(rows[day].page_views > 0 for day in kept)
    assert max(row.active_users for row in rows.values()) <= 40

    # Today, as the API says: active users, visitors, bots and token calls, and who is online.
    stats = staff_api.get(reverse("activity:stats")).json()
    assert stats["active"]["day"] > 0 and stats["active"]["month"] >= stats["active"]["week"] >= stats["active"]["day"]
    assert stats["unique_visitors"]["day"] > stats["active"]["day"]
    assert stats["bots"]["day"] > 0 and stats["machines"]["day"] > 0
    assert stats["online"] >= 4

    # Sessions with next pages: users browsing now, and where people went after today's top pages.
    live = [user for user in users if len(sessions.current(str(user.pk))) >= 3]
    assert len(live) >= 3
    session = staff_api.get(reverse("activity:session", kwargs={"user": live[0].pk})).json()
    assert session["count"] >= 3 and all(view["path"] in demo.SITE for view in session["results"])
    top = sessions.top_paths(TODAY, 5)
    assert any(following for following in recommendations.top_next(TODAY, [path for path, _ in top]))
    picked = staff_api.get(reverse("activity:next-pages"), {"path": session["results"][-1]["path"], "n": 2})
    assert picked.status_code == 200 and picked.json()["results"]

    # Groups with members, ordered by last seen.
    for name, _ in demo.GROUPS:
        group = Group.objects.get(name=name)
        members = staff_api.get(reverse("activity:group-members", kwargs={"group_id": group.pk})).json()
        assert members["count"] == group.user_set.count() >= 2
        assert members["results"][0]["last_seen"] is not None

    # Two tokens that work: their users' own last seen, moved by their API calls today.
    tokens = list(Token.objects.filter(user__in=users).select_related("user"))
    assert len(tokens) == 2
    for token in tokens:
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        seen = api.get(reverse("activity:last-seen", kwargs={"user": token.user.pk}))
        assert seen.status_code == 200 and seen.json()["last_seen"].startswith(TODAY.isoformat())

    # The flush wrote the last seen of every demo user seen (most were) to the database.
    seen = {user for user, ts in last_seen.get_many(str(user.pk) for user in users).items() if ts is not None}
    assert len(seen) >= 30
    assert set(UserActivity.objects.filter(account__in=users).values_list("user_id", flat=True)) == seen

    # The dashboard: every bar of both charts has a figure, the tables have rows.
    html = admin_client.get(DASHBOARD).content.decode()
    bars = BAR_RE.findall(html)
    active = [int(value) for value, _ in bars[: dashboard_figures.DAYS]]
    views = [int(value) for value, _ in bars[dashboard_figures.DAYS :]]
    assert len(bars) == 2 * dashboard_figures.DAYS and all(value != "" for value, _ in bars)
    assert sum(value > 0 for value in active) >= 20 and active[-1] > 0
    assert all(value > 0 for value in views[-conf.settings.PAGE_STATS_DAYS :])
    for table in ("activity-top-paths", "activity-where-next", "activity-most-active"):
        body = re.search(rf'id="{table}".*?</table>', html, re.S).group(0)
        assert "No page views yet today" not in body, table
    assert re.search(r'id="activity-where-next".*?<td>/[^<]*</td><td>/[^<]+ \(\d+\)', html, re.S)


@pytest.mark.django_db
def test_a_rerun_reuses_the_users_groups_and_tokens(noon):
    run("--users", "12", "--days", "3")
    first = {user.username: user.pk for user in demo_users()}
    members = {name: set(Group.objects.get(name=name).user_set.values_list("pk", flat=True)) for name, _ in demo.GROUPS}
    tokens = set(Token.objects.values_list("key", flat=True))

    out = run("--users", "12", "--days", "3")

    assert re.match(r"activity_demo: 12 users \(0 new\), 3 groups \(\d+ memberships in the bitmaps\), 2 API", out)
    assert {user.username: user.pk for user in demo_users()} == first
    assert {
        name: set(Group.objects.get(name=name).user_set.values_list("pk", flat=True)) for name, _ in demo.GROUPS
    } == (members)
    assert set(Token.objects.values_list("key", flat=True)) == tokens
    assert DailyRollup.objects.count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--users", "0"), "--users must be between 1 and 5000, not 0."),
        (("--users", "5001"), "--users must be between 1 and 5000, not 5001."),
        (("--days", "0"), "--days must be between 1 and 30, not 0."),
        (("--days", "31"), "--days must be between 1 and 30, not 31."),
    ],
)
def test_sizes_out_of_bounds_are_refused_before_anything_is_written(args, message, redis_client):
    with pytest.raises(CommandError, match=re.escape(message)):
        run(*args)
    assert not demo_users().exists() and not Group.objects.exists()
    assert list(redis_client.scan_iter(match=f"{conf.settings.KEY_PREFIX}*")) == []


@pytest.mark.django_db
def test_a_redis_that_cannot_serve_leaves_the_database_as_it_was(noon):
    models = (get_user_model(), Group, Token, UserActivity, DailyRollup, RetentionCell)
    get_user_model().objects.create_user("someone")  # the site's own data, left alone
    before = {model: list(model.objects.values_list("pk", flat=True)) for model in models}
    away = override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")
    with away, pytest.raises(CommandError, match="Redis cannot serve"):
        run("--users", "12", "--days", "3")
    assert {model: list(model.objects.values_list("pk", flat=True)) for model in models} == before


def active_members(api: APIClient) -> dict[str, int]:
    """Each demo group's members active this month, as the API answers."""
    found = {}
    for name, _ in demo.GROUPS:
        url = reverse("activity:group-active", kwargs={"group_id": Group.objects.get(name=name).pk})
        found[name] = api.get(url, {"period": "month"}).json()["active"]
    return found


@pytest.mark.django_db
def test_groups_count_their_active_members_without_a_backfill(noon, staff_api):
    """The membership signals set a member's bit only once their transaction commits, which a test's
    never does: as when Redis was away then, or on a rerun, whose members are in the groups already
    and send no signal. The demo rebuilds the bitmaps itself, as ``activity_backfill`` would."""
    run("--users", "30", "--days", "7")
    counted = active_members(staff_api)
    groups.rebuild_memberships()  # what activity_backfill does: nothing left for it to correct
    assert active_members(staff_api) == counted
    assert counted["Demo customers"] > 0 and all(active <= 30 for active in counted.values())


@pytest.mark.django_db
def test_no_cached_table_or_report_from_before_the_demo_is_served(noon, staff_api):
    retention = (reverse("activity:retention"), {"period": "day", "cohorts": 3, "periods": 3})
    report = reverse("activity:report", kwargs={"name": "most-active"})
    empty = staff_api.get(*retention)
    assert (empty["X-Cache"], staff_api.get(*retention)["X-Cache"]) == ("miss", "hit")  # a cached copy
    assert [cohort["size"] for cohort in empty.json()["cohorts"]] == [0, 0, 0]
    assert staff_api.get(report).json()["count"] == 0

    run("--users", "12", "--days", "3")

    table = staff_api.get(*retention)
    assert table["X-Cache"] == "miss"  # the copy from before was dropped
    assert sum(cohort["size"] for cohort in table.json()["cohorts"]) > 0
    ranked = staff_api.get(report)
    assert ranked["X-Cache"] == "hit" and ranked.json()["count"] > 0  # rebuilt by the demo


def test_the_same_seed_makes_the_same_traffic_and_another_seed_other_traffic():
    accounts = [demo.Account(pk, str(pk), demo.username(pk)) for pk in range(1, 31)]

    def traffic(seed: int) -> list:
        return [*demo.past(accounts, 10, seed, NOON), ("live", demo.live(accounts, 2, seed, NOON))]

    assert traffic(3) == traffic(3)
    assert traffic(3) != traffic(4)
    days = dict(demo.past(accounts, 10, 3, NOON))
    assert dict(demo.past(accounts, 4, 3, NOON)) == {day: days[day] for day in list(days)[-4:]}


def test_usernames_are_distinct_and_stable():
    names = [demo.username(n) for n in range(demo.MAX_USERS)]
    assert len(set(names)) == demo.MAX_USERS
    assert names[:2] == ["demo.ada.hopper", "demo.alan.hopper"]


@pytest.mark.django_db
def test_the_front_page_leads_to_the_dashboard_and_view_site_answers(admin_client, client):
    home = client.get("/")
    assert (home.status_code, home["Location"]) == (302, DASHBOARD)
    assert client.get(DASHBOARD).status_code == 302  # signed out: the admin's login first
    assert admin_client.get("/", follow=True).redirect_chain == [(DASHBOARD, 302)]
    site_url = admin_client.get(reverse("admin:index")).context["site_url"]
    assert site_url == reverse("activity:docs")
    assert client.get(site_url).status_code == 200
    unknown = client.get("/no-such-page/")
    assert (unknown.status_code, unknown["Content-Type"]) == (404, "application/json")


@pytest.mark.django_db
@override_settings(ACTIVITY_TRACK_EXCLUDE_PATHS=["/static/"])  # the view itself says so
def test_the_favicon_is_an_icon_and_no_activity(member, redis_client):
    browser = Client()
    browser.force_login(member)
    icon = browser.get("/favicon.ico")
    assert (icon.status_code, icon["Content-Type"]) == (200, "image/x-icon")
    assert icon.content.startswith(b"\x00\x00\x01\x00")  # an ICO file's header
    assert last_seen.get(str(member.pk)) is None  # not tracked, where the site's other answers are:
    browser.get("/")
    assert last_seen.get(str(member.pk)) is not None
