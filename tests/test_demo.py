"""``manage.py activity_demo``: its traffic goes through the service's own write path into the
real Redis and database, and every figure the dashboard and the API show is there afterwards
(active users on past days, page views, sessions with next pages, groups with members, bots, API
calls and tokens); a rerun reuses its users; the same seed makes the same traffic. And the example
project's front door: ``/`` leads to the dashboard, the admin's "View site" to a page that answers."""

from __future__ import annotations

import io
import re
from datetime import UTC, date, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from activity import clock, conf
from activity.admin import figures as dashboard_figures
from activity.models import DailyRollup, UserActivity
from activity.services import demo, last_seen, recommendations, sessions

NOON = datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp()  # a Wednesday
TODAY = date(2026, 11, 25)
DASHBOARD = reverse("admin:activity-dashboard")
BAR_RE = re.compile(r'data-value="(\d*)" data-day="([0-9-]+)"')


@pytest.fixture
def at(monkeypatch) -> float:
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
def test_demo_fills_every_figure_the_dashboard_and_the_api_show(at, staff_api, admin_client):
    out = run("--users", "40", "--days", "30", "--seed", "7")

    assert out.startswith("activity_demo: 40 users (40 new), 3 groups, 2 API tokens")
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
def test_a_rerun_reuses_the_users_groups_and_tokens(at):
    run("--users", "12", "--days", "3")
    first = {user.username: user.pk for user in demo_users()}
    members = {name: set(Group.objects.get(name=name).user_set.values_list("pk", flat=True)) for name, _ in demo.GROUPS}
    tokens = set(Token.objects.values_list("key", flat=True))

    out = run("--users", "12", "--days", "3")

    assert out.startswith("activity_demo: 12 users (0 new), 3 groups, 2 API tokens")
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
