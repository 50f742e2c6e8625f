"""The dashboard in a real headless browser: Debian's chromium driven by Playwright against the live
server. Log in as staff, watch the live refresh bring new figures equal to ``GET /api/v1/stats/``,
then open a user's activity page and find their session. Screenshots go to tests/artifacts/.

Without chromium installed the test is skipped with the install command, unless
``ACTIVITY_REQUIRE_BROWSER`` is set (``.ci/run`` sets it after installing chromium): then it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from activity import clock
from activity.admin import dashboard
from activity.events import Event
from activity.services import flush, ingest
from tests.test_admin import STATS_FIGURES, api_figure

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As Debian's chromium needs them here: no sandbox as root, and no background calls to Google.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PASSWORD = "correct horse battery staple"

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not Path(CHROMIUM).exists():
        message = "Debian's chromium is not installed (apt-get install chromium)"
        if os.environ.get("ACTIVITY_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are plain
    # blocking calls all the same, so Django's async-safety guard is told so.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def record(users: range, path_of) -> None:
    ingest.record_events([Event(user=str(n), ts=clock.now(), path=path_of(n)) for n in users])


def shown_figures(page) -> dict[str, str]:
    return page.eval_on_selector_all(
        "#activity-panel [data-figure]",
        "nodes => Object.fromEntries(nodes.map(n => [n.dataset.figure, n.textContent]))",
    )


@pytest.mark.django_db(transaction=True)
def test_staff_sees_live_figures_equal_to_the_stats_api_and_a_users_session(
    browser, live_server, django_user_model, redis_client, monkeypatch
):
    monkeypatch.setattr(dashboard, "REFRESH_S", 0.5)
    ARTIFACTS.mkdir(exist_ok=True)
    django_user_model.objects.create_superuser("boss", "boss@example.com", PASSWORD)
    record(range(5001, 5026), lambda n: f"/catalogue/{n % 4}/")
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
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
