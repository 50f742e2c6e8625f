"""The dashboard in a real headless browser: Debian's chromium driven by Playwright against the live
server. Log in as staff, find the retention heatmap equal to ``GET /api/v1/retention/`` (for all
users, then for a group through the picker) and a funnel's bars equal to
``GET /api/v1/funnels/<id>/`` (today, then this month through the picker), watch the live refresh
bring new figures equal to ``GET /api/v1/stats/`` and a group's row of the top groups equal to
``GET /api/v1/groups/<id>/active/``, then open a user's activity page and find their session; and,
under ``make run``'s server, the tiles following the live stream. Screenshots go to tests/artifacts/.

Without chromium installed the test is skipped, or fails under ``ACTIVITY_REQUIRE_BROWSER`` (the
``chromium`` fixture of conftest.py).
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from django.contrib.auth.models import Group

from activity import clock
from activity.admin import dashboard
from activity.events import Event
from activity.models import Funnel
from activity.services import flush, ingest
from tests import served
from tests.conftest import ARTIFACTS
from tests.served import served_site
from tests.test_admin import STATS_FIGURES, api_figure

PASSWORD = "correct horse battery staple"

pytestmark = pytest.mark.browser


def record(users: range, path_of) -> None:
    ingest.record_events([Event(user=str(n), ts=clock.now(), path=path_of(n)) for n in users])


def shown_figures(page) -> dict[str, str]:
    return page.eval_on_selector_all(
        "#activity-panel [data-figure]",
        "nodes => Object.fromEntries(nodes.map(n => [n.dataset.figure, n.textContent]))",
    )


def assert_heatmap_matches_the_api(page, server: str, query: str) -> None:
    """Every cell the heatmap drew (count, and share as its opacity) equals the retention API's."""
    cells = page.eval_on_selector_all(
        "#activity-retention rect.cell",
        "nodes => nodes.map(n => [n.dataset.cohort, +n.dataset.k, n.dataset.count, n.dataset.size])",
    )
    api = page.request.get(f"{server}/api/v1/retention/?cohorts=14&periods=14{query}").json()
    expected = [
        [row["start"], k, "" if count is None else str(count), str(row["size"])]
        for row in api["cohorts"]
        for k, count in enumerate(row["retained"])
    ]
    assert cells == expected and any(count not in ("", "0") for _, _, count, _ in cells)


def assert_funnel_matches_the_api(page, server: str, funnel: int, period: str) -> None:
    """Every bar the funnel drew (people, drop-off) equals the funnel API's step."""
    bars = page.eval_on_selector_all(
        f"#activity-funnels [data-funnel='{funnel}'] rect.bar",
        "nodes => nodes.map(n => [+n.dataset.step, +n.dataset.people, +n.dataset.dropped])",
    )
    api = page.request.get(f"{server}/api/v1/funnels/{funnel}/?period={period}").json()
    assert bars == [[step["step"], step["people"], step["dropped"]] for step in api["steps"]]
    assert bars[0][1] == 7 and bars[1][1] == 3


@pytest.mark.django_db(transaction=True)
def test_staff_sees_live_figures_equal_to_the_stats_api_and_a_users_session(
    chromium, live_server, django_user_model, redis_client, monkeypatch
):
    monkeypatch.setattr(dashboard, "REFRESH_S", 0.5)
    ARTIFACTS.mkdir(exist_ok=True)
    django_user_model.objects.create_superuser("boss", "boss@example.com", PASSWORD)
    crew = Group.objects.create(name="crew")  # 10 of the first users and 5 of the later ones
    members = [*range(5001, 5011), *range(6001, 6006)]
    django_user_model.objects.bulk_create(django_user_model(pk=pk, username=f"crew{pk}") for pk in members)
    crew.user_set.add(*members)
    funnel = Funnel.objects.create(name="checkout", steps=["/catalogue/1/", "/checkout/"], window=3600)
    record(range(5001, 5026), lambda n: f"/catalogue/{n % 4}/")
    record(range(5001, 5011), lambda n: "/checkout/")  # of the funnel's 7 entrants, 3 go on
    context = chromium.new_context(viewport={"width": 1400, "height": 1100})
    page = context.new_page()
    try:
        page.goto(f"{live_server.url}/admin/login/?next=/admin/")
        page.fill("#id_username", "boss")
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        page.click("text=Activity dashboard")  # linked from the admin index
        page.wait_for_selector("#activity-panel [data-figure=online]")
        assert page.text_content("[data-figure=online]") == "26"  # 25 users and the staff user
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
        assert_heatmap_matches_the_api(page, live_server.url, "")
        assert_funnel_matches_the_api(page, live_server.url, funnel.pk, "day")
        page.select_option("#id_funnel_period", "month")  # the period picker: this month's, the same here
        page.click("#activity-funnels-show")
        page.wait_for_url("**funnel_period=month**")
        assert_funnel_matches_the_api(page, live_server.url, funnel.pk, "month")
        page.select_option("#id_group", str(crew.pk))  # the group picker: the same table, for the crew
        page.click("#activity-retention-show")
        page.wait_for_url(f"**group={crew.pk}**")
        assert_heatmap_matches_the_api(page, live_server.url, f"&group={crew.pk}")
        page.goto(f"{live_server.url}/admin/activity/dashboard/")
        page.wait_for_selector("#activity-panel [data-figure=online]")

        record(range(6001, 6011), lambda n: "/checkout/")  # ten more users, after the page loaded
        page.wait_for_function("() => document.querySelector('[data-figure=online]').textContent === '36'")
        assert int(page.get_attribute("#activity-panel", "data-refreshes")) >= 1  # swapped in, not reloaded
        shown = shown_figures(page)
        api = page.request.get(f"{live_server.url}/api/v1/stats/")
        assert api.ok
        assert {name: shown[name] for name in STATS_FIGURES} == {
            name: api_figure(api.json(), name) for name in STATS_FIGURES
        }
        assert "/checkout/" in page.text_content("#activity-top-paths")
        row = f"#activity-top-groups tr[data-group='{crew.pk}']"
        group_api = page.request.get(f"{live_server.url}/api/v1/groups/{crew.pk}/active/").json()
        assert (group_api["active"], group_api["members"]) == (15, 15)
        assert page.text_content(f"{row} [data-figure='group.active']") == str(group_api["active"])
        assert page.text_content(f"{row} [data-figure='group.members']") == str(group_api["members"])
        page.screenshot(path=str(ARTIFACTS / "dashboard-refreshed.png"), full_page=True)

        flush.flush()  # the activity rows the changelist lists
        page.goto(f"{live_server.url}/admin/activity/useractivity/?q=6003")
        page.click("th.field-user_id a")
        session = page.text_content("table.activity-session")
        assert "/checkout/" in session
        assert "(online)" in page.text_content("div.field-live_last_seen")
        page.screenshot(path=str(ARTIFACTS / "user-activity.png"), full_page=True)
    finally:
        context.close()


def test_the_dashboard_follows_the_live_stream_under_make_runs_server(chromium, tmp_path, redis_client):
    """Under granian (the stream needs an ASGI server): the page opens the stream, and a page view
    posted to the API shows in the tiles, "pages now" and today's bar within 2 s, with no refresh of
    the panel (that comes once a minute)."""
    with served_site(tmp_path) as site:
        context = chromium.new_context(viewport={"width": 1400, "height": 1100})
        page = context.new_page()
        try:
            page.goto(f"{site.base}/admin/login/?next=/admin/activity/dashboard/")
            page.fill("#id_username", served.USERNAME)
            page.fill("#id_password", served.PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_function("() => +document.getElementById('activity-panel').dataset.events >= 1")
            online = int(page.text_content("[data-figure=online]"))
            posted = time.monotonic()
            body = json.dumps({"events": [{"user": "live-9", "path": "/just-now"}]}).encode()
            headers = {"Authorization": f"Token {site.token}", "Content-Type": "application/json"}
            urllib.request.urlopen(urllib.request.Request(f"{site.base}/api/v1/events/", body, headers)).close()
            page.wait_for_function(
                f"() => +document.querySelector('[data-figure=online]').textContent > {online}"
                " && document.getElementById('activity-pages-now').textContent.includes('/just-now')",
                timeout=2000,
            )
            assert time.monotonic() - posted < 2
            stats = page.request.get(f"{site.base}/api/v1/stats/").json()
            assert page.get_attribute("svg[data-live='active.day'] rect.live", "data-value") == str(
                stats["active"]["day"]
            )
            assert page.get_attribute("#activity-panel", "data-refreshes") == "0"
            page.screenshot(path=str(ARTIFACTS / "dashboard-live.png"), full_page=True)
        finally:
            context.close()
