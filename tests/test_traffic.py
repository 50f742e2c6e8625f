"""People apart from bots and machines, and browsers' opt-out signals, through the real
middleware, Redis and database: what each kind of request records, and what it never does."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from crawlerdetect import CrawlerDetect
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from rest_framework.authtoken.models import Token

from activity import clock, conf
from activity.events import Event
from activity.services import audience, ingest, sessions, traffic
from activity.store import families, keys
from activity.web import middleware
from tests.clients import APIClient, Client, RequestFactory
from tests.last_seen_state import stored
from tests.redis_counts import CommandDelta

pytestmark = [pytest.mark.urls("tests.pages"), pytest.mark.django_db]

GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
HEADLESS = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/120.0 Safari/537.36"
CHROME = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"
COOKIE = middleware.VISITOR_COOKIE_NAME


def figures() -> audience.Stats:
    return audience.stats()


def our_keys(redis_client) -> set[str]:
    return set(redis_client.scan_iter(match=families.sweep_pattern()))


def returning_visitor(**headers: str) -> Client:
    """A browser holding a valid visitor cookie (got on a first request as a person)."""
    browser = Client(headers={"User-Agent": CHROME})
    browser.get("/pricing")
    assert COOKIE in browser.cookies
    browser.defaults.update({f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()})
    return browser


# --- bots ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "agent",
    [
        pytest.param(GOOGLEBOT, id="googlebot"),
        pytest.param("curl/8.5.0", id="curl"),
        pytest.param("python-requests/2.32", id="python-requests"),
        pytest.param("Mozilla/5.0+(compatible; UptimeRobot/2.0; http://www.uptimerobot.com/)", id="uptime-probe"),
        pytest.param(HEADLESS, id="headless-browser"),
        pytest.param("", id="no-user-agent"),
        pytest.param("   ", id="blank-user-agent"),
    ],
)
def test_a_bot_is_no_visitor_page_view_or_session_and_is_counted_apart(agent, redis_client):
    bot = Client(headers={"User-Agent": agent})
    for _ in range(3):
        response = bot.get("/pricing")
        assert COOKIE not in response.cookies  # never a visitor cookie, so never a visit
    bot.cookies[COOKIE] = returning_visitor().cookies[COOKIE].value  # even one holding a valid cookie
    bot.get("/pricing")
    stats = figures()
    assert (stats.bots_day, stats.unique_visitors_day, stats.new_visitors_day) == (4, 0, 0)
    assert sessions.page_views(stats.day) == 0 and sessions.started(stats.day) == 0


def test_a_request_without_any_user_agent_header_is_a_bot(redis_client):
    request = RequestFactory().get("/pricing")
    del request.META["HTTP_USER_AGENT"]
    assert traffic.classify(request) == traffic.BOT


def test_a_signed_in_bot_keeps_its_last_seen_but_is_no_page_view_or_active_user(member, redis_client):
    bot = Client(headers={"User-Agent": "curl/8.5.0"})
    bot.force_login(member)
    bot.get("/pricing")
    user = str(member.pk)
    assert stored(redis_client).get(user) is not None
    assert redis_client.exists(keys.session(user)) == 0
    stats = figures()
    assert (stats.active_day, stats.bots_day, stats.unique_visitors_day) == (0, 1, 0)


def test_people_are_still_people(member, redis_client):
    browser = Client(headers={"User-Agent": CHROME})
    browser.force_login(member)
    browser.get("/pricing")
    stats = figures()
    assert (stats.active_day, stats.bots_day, stats.unique_visitors_day) == (1, 0, 1)
    assert sessions.page_views(stats.day) == 1


def test_site_patterns_add_bots_case_insensitively(redis_client):
    assert not traffic.is_bot("AcmeMonitor/3.1")
    with override_settings(ACTIVITY_BOT_PATTERNS=["acmemonitor/\\d", "internal,probe{1,2}"]):
        assert traffic.is_bot("AcmeMonitor/3.1") and traffic.is_bot("Internal,Probe")
        assert not traffic.is_bot(CHROME)
        response = Client(headers={"User-Agent": "AcmeMonitor/3.1"}).get("/pricing")
        assert COOKIE not in response.cookies
    assert figures().bots_day == 1


def test_an_environment_pattern_is_one_regular_expression_commas_included():
    with override_settings(ACTIVITY_BOT_PATTERNS="acme{1,3}|probe"):
        assert conf.settings.BOT_PATTERNS == ("acme{1,3}|probe",)
        assert traffic.is_bot("probe/1") and traffic.is_bot("acmeee")
    with override_settings(ACTIVITY_BOT_PATTERNS=""):
        assert conf.settings.BOT_PATTERNS == ()


@pytest.mark.parametrize("pattern", ["(unclosed", "*star", "[z-a]"])
def test_an_invalid_site_pattern_is_refused_naming_it(pattern):
    with pytest.raises(ImproperlyConfigured, match="ACTIVITY_BOT_PATTERNS") as refused:
        traffic.bot_patterns(("fine", pattern))
    assert repr(pattern) in str(refused.value)


def test_user_agents_are_classified_once_each_in_a_bounded_cache(monkeypatch):
    """crawlerdetect (watched) is asked about an agent once while the process remembers it, and the
    process remembers the last ``AGENT_CACHE_SIZE`` agents."""
    asked: Counter[str] = Counter()
    ask = CrawlerDetect.is_crawler

    def watched(self, user_agent=None):
        asked[user_agent] += 1
        return ask(self, user_agent)

    monkeypatch.setattr(CrawlerDetect, "is_crawler", watched)
    agents = [f"{CHROME} once/{n}" for n in range(traffic.AGENT_CACHE_SIZE + 500)]
    for agent in agents:
        traffic.is_bot(agent)
    traffic.is_bot(agents[-1])
    assert asked[agents[-1]] == 1  # remembered
    traffic.is_bot(agents[500])  # the oldest of the last AGENT_CACHE_SIZE
    traffic.is_bot(agents[499])  # one more: forgotten
    assert (asked[agents[500]], asked[agents[499]]) == (1, 2)
    assert set(asked.values()) <= {1, 2} and sum(asked.values()) == len(agents) + 1


# --- machines (API tokens) ----------------------------------------------------------------


def token_client(user) -> APIClient:
    api = APIClient(headers={"User-Agent": "python-requests/2.32"})
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return api


def test_a_token_client_is_machine_traffic_last_seen_only(staff, redis_client):
    api = token_client(staff)
    assert api.get("/api/v1/online/").status_code == 200
    user = str(staff.pk)
    assert stored(redis_client).get(user) is not None  # its last seen is recorded
    stats = figures()
    assert (stats.machines_day, stats.bots_day, stats.active_day, stats.unique_visitors_day) == (1, 0, 0, 0)
    assert redis_client.zcard(keys.top_viewers(f"d:{stats.day:%Y%m%d}")) == 0  # never in most-active


@override_settings(ACTIVITY_COUNT_MACHINES=True)
def test_counting_machines_puts_them_back_in_the_active_figures(staff, redis_client):
    token_client(staff).get("/api/v1/online/")
    stats = figures()
    assert (stats.machines_day, stats.active_day) == (1, 1)


def test_a_session_signed_in_api_call_is_a_person(staff, redis_client):
    browser = Client(headers={"User-Agent": CHROME})
    browser.force_login(staff)
    browser.get("/api/v1/online/")
    assert (figures().machines_day, figures().active_day) == (0, 1)


# --- Global Privacy Control and Do Not Track --------------------------------------------------


@pytest.mark.parametrize("signal", [{"Sec-GPC": "1"}, {"DNT": "1"}], ids=["gpc", "dnt"])
def test_an_opt_out_signal_means_no_cookie_and_no_visit(signal, redis_client):
    fresh = Client(headers={"User-Agent": CHROME, **signal})
    with CommandDelta(redis_client) as delta:
        assert COOKIE not in fresh.get("/pricing").cookies
    assert delta.calls == {}  # nothing recorded, not even a count
    returning = returning_visitor(**signal)  # a cookie from before the signal: removed, no visit
    response = returning.get("/pricing")
    assert response.cookies[COOKIE].value == "" and response.cookies[COOKIE]["max-age"] == 0
    stats = figures()
    assert (stats.unique_visitors_day, stats.new_visitors_day) == (0, 0)


@pytest.mark.parametrize("signal", [{"Sec-GPC": "1"}, {"DNT": "1"}], ids=["gpc", "dnt"])
def test_signed_in_tracking_is_unaffected_by_an_opt_out_signal(signal, member, redis_client):
    browser = Client(headers={"User-Agent": CHROME, **signal})
    browser.force_login(member)
    browser.get("/pricing")
    assert sessions.page(str(member.pk)) is not None
    assert figures().active_day == 1


@override_settings(ACTIVITY_HONOR_GPC=False)
def test_signals_not_honoured_are_ignored(redis_client):
    browser = Client(headers={"User-Agent": CHROME, "Sec-GPC": "1", "DNT": "1"})
    assert COOKIE in browser.get("/pricing").cookies
    browser.get("/pricing")
    assert figures().unique_visitors_day == 1


def test_gpc_zero_is_no_opt_out(redis_client):
    assert COOKIE in Client(headers={"User-Agent": CHROME, "Sec-GPC": "0", "DNT": "0"}).get("/pricing").cookies


# --- page views only within their statistics' retention --------------------------------------


def test_a_page_view_dated_before_the_statistics_retention_moves_last_seen_only(redis_client):
    old = clock.now() - timedelta(days=conf.settings.PAGE_STATS_DAYS + 1).total_seconds()
    result = ingest.record_events([Event(user="late", ts=old, path="/pricing")])
    assert result.last_seen_updated == 1 and result.sessions_started == 0
    assert redis_client.exists(keys.session("late")) == 0
    assert ingest.record_events([Event(user="late", ts=clock.now(), path="/pricing")]).sessions_started == 1


# --- the stats API and the dashboard -------------------------------------------------------


def test_stats_and_dashboard_show_bots_and_machines(staff, staff_api, admin_client, redis_client):
    Client(headers={"User-Agent": GOOGLEBOT}).get("/pricing")
    token_client(staff).get("/api/v1/online/")
    body = staff_api.get("/api/v1/stats/").json()
    assert (body["bots"], body["machines"]) == ({"day": 1}, {"day": 1})
    html = admin_client.get("/admin/activity/dashboard/panel/").json()["html"]
    assert 'data-figure="bots.day">1<' in html and 'data-figure="machines.day">1<' in html


def test_a_huge_user_agent_is_read_up_to_a_bounded_prefix():
    padding = " x" * 4000  # 8 KB: what a client could send to make every classification costly
    assert traffic.is_bot(GOOGLEBOT + padding) and not traffic.is_bot(CHROME + padding)
    assert not traffic.is_bot(CHROME + padding + " Googlebot/2.1")  # past the prefix: not read
