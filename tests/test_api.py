"""The REST contract of docs/api.md: ingest validation, permissions, last seen, online, health, docs."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission
from django.test import override_settings
from django.urls import reverse

from activity import clock
from activity.store import keys
from project.redis_server import free_port
from tests.clients import APIClient
from tests.last_seen_state import stored

EVENTS = "/api/v1/events/"


def activity_keys(redis_client) -> list[str]:
    """Keys of ours other than request counters (throttles count every request, whatever its answer;
    they live under the same prefix, in Django's cache or the rate-limit counters), sorted, each once:
    SCAN may return a key twice while Redis rehashes its keyspace."""
    counters = (f"{keys.prefix()}cache", f"{keys.prefix()}rate:")
    return sorted({k for k in redis_client.scan_iter(match=f"{keys.prefix()}*") if not k.startswith(counters)})


def post_events(api: APIClient, events) -> object:
    return api.post(EVENTS, {"events": events}, format="json")


class TestIngest:
    def test_accepts_and_counts_forward_moves(self, staff_api, redis_client):
        now = clock.now()
        response = post_events(
            staff_api,
            [
                {"user": "42", "ts": now - 10},
                {"user": 42, "ts": now - 20},
                {"user": "a@b", "ts": "2026-01-01T00:00:00Z"},
            ],
        )
        assert response.status_code == 202
        assert response.json() == {"accepted": 3, "last_seen_updated": 2}
        assert stored(redis_client).get("42") == round(now - 10, 3)

    def test_missing_ts_means_now(self, staff_api, redis_client):
        before = clock.now()
        assert post_events(staff_api, [{"user": "7"}]).status_code == 202
        assert before - 0.01 <= stored(redis_client).get("7") <= clock.now() + 0.01

    def test_ingest_permission(self, member, member_api, redis_client):
        assert post_events(member_api, [{"user": "1"}]).status_code == 403
        member.user_permissions.add(Permission.objects.get(codename="ingest_events"))
        api = APIClient()
        api.force_authenticate(type(member).objects.get(pk=member.pk))
        assert post_events(api, [{"user": "1"}]).status_code == 202

    def test_anonymous_is_401(self, db):
        assert post_events(APIClient(), [{"user": "1"}]).status_code == 401


BAD_EVENTS = [
    pytest.param({"user": "1", "ts": 1}, ("events",), id="events-not-a-list"),
    pytest.param([], ("events",), id="events-empty"),
    pytest.param([{"ts": 1}], ("events", "0", "user"), id="user-missing"),
    pytest.param([{"user": ""}], ("events", "0", "user"), id="user-empty"),
    pytest.param([{"user": "x" * 65}], ("events", "0", "user"), id="user-65-chars"),
    pytest.param([{"user": "a b"}], ("events", "0", "user"), id="user-space"),
    pytest.param([{"user": "a/b"}], ("events", "0", "user"), id="user-slash"),
    pytest.param([{"user": "a*"}], ("events", "0", "user"), id="user-star"),
    pytest.param([{"user": 1.5}], ("events", "0", "user"), id="user-float"),
    pytest.param([{"user": True}], ("events", "0", "user"), id="user-bool"),
    pytest.param([{"user": ["1"]}], ("events", "0", "user"), id="user-list"),
    pytest.param([{"user": "1", "ts": -1}], ("events", "0", "ts"), id="ts-negative"),
    pytest.param([{"user": "1", "ts": True}], ("events", "0", "ts"), id="ts-bool"),
    pytest.param([{"user": "1", "ts": "yesterday"}], ("events", "0", "ts"), id="ts-unparsable-date"),
    pytest.param([{"user": "1", "ts": "2026-13-45T00:00:00Z"}], ("events", "0", "ts"), id="ts-impossible-date"),
    pytest.param([{"user": "1", "ts": None}], ("events", "0", "ts"), id="ts-null"),
    pytest.param([{"user": "1", "path": "/" + "p" * 2048}], ("events", "0", "path"), id="path-2049-chars"),
    pytest.param([{"user": "1", "path": 5}], ("events", "0", "path"), id="path-not-string"),
    pytest.param([{"user": "1"}, {"user": "2", "ts": -5}], ("events", "1", "ts"), id="second-event-bad"),
]


class TestIngestValidation:
    @pytest.mark.parametrize(("events", "field"), BAD_EVENTS)
    def test_bad_event_is_400_naming_the_field_and_writes_nothing(self, staff_api, redis_client, events, field):
        response = post_events(staff_api, events)
        assert response.status_code == 400
        error = response.json()
        for part in field:
            error = error[part]
        assert error and all(isinstance(reason, str) and reason for reason in error)
        assert activity_keys(redis_client) == []

    @pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
    def test_non_finite_ts_is_400_naming_ts(self, staff_api, redis_client, literal):
        body = '{"events": [{"user": "1", "ts": ' + literal + "}]}"
        response = staff_api.post(EVENTS, body, content_type="application/json")
        assert response.status_code == 400
        assert response.json()["events"]["0"]["ts"] == ["Must be a finite number."]
        assert activity_keys(redis_client) == []

    def test_ts_too_far_in_the_future(self, staff_api, redis_client):
        response = post_events(staff_api, [{"user": "1", "ts": clock.now() + 120}])
        assert response.status_code == 400
        assert "future" in response.json()["events"]["0"]["ts"][0]
        assert post_events(staff_api, [{"user": "1", "ts": clock.now() + 30}]).status_code == 202

    def test_events_missing(self, staff_api, redis_client):
        response = staff_api.post(EVENTS, {}, format="json")
        assert response.status_code == 400 and "events" in response.json()
        assert activity_keys(redis_client) == []

    def test_not_json(self, staff_api, redis_client):
        response = staff_api.post(EVENTS, "{not json", content_type="application/json")
        assert response.status_code == 400
        assert "JSON parse error" in response.json()["detail"]
        assert activity_keys(redis_client) == []

    def test_over_the_batch_limit(self, staff_api, redis_client):
        with override_settings(ACTIVITY_MAX_BATCH=10):
            response = post_events(staff_api, [{"user": str(i)} for i in range(11)])
            assert response.status_code == 400
            assert response.json()["events"] == ["Ensure this field has no more than 10 elements."]
            assert post_events(staff_api, [{"user": str(i)} for i in range(10)]).status_code == 202

    def test_body_over_the_size_limit_is_413(self, staff_api, redis_client):
        with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000):
            response = post_events(staff_api, [{"user": str(i), "path": "/x" * 20} for i in range(50)])
        assert response.status_code == 413
        assert activity_keys(redis_client) == []


class TestReads:
    def test_last_seen_of_self_and_others(self, member, member_api, staff_api, redis_client):
        post_events(staff_api, [{"user": str(member.pk), "ts": clock.now() - 5}, {"user": "other", "ts": 100}])
        own = member_api.get(f"/api/v1/users/{member.pk}/last-seen/")
        assert own.status_code == 200
        body = own.json()
        assert body["user"] == str(member.pk) and body["online"] is True and body["last_seen"].endswith("Z")
        assert member_api.get("/api/v1/users/other/last-seen/").status_code == 403
        other = staff_api.get("/api/v1/users/other/last-seen/").json()
        assert other == {"user": "other", "ts": 100.0, "last_seen": "1970-01-01T00:01:40.000Z", "online": False}
        assert APIClient().get("/api/v1/users/other/last-seen/").status_code == 401

    def test_never_seen_is_404_and_bad_id_400(self, staff_api):
        assert staff_api.get("/api/v1/users/nobody/last-seen/").status_code == 404
        assert staff_api.get("/api/v1/users/a*b/last-seen/").status_code == 400

    def test_online_pages_cover_everyone_once_most_recent_first(self, staff_api, staff, redis_client):
        now = clock.now()
        # 25 users, several sharing one timestamp (ties must not be skipped or repeated).
        events = [{"user": f"u{i:02d}", "ts": round(now - 100 - (i // 3), 3)} for i in range(25)]
        events.append({"user": "stale", "ts": now - 5000})
        post_events(staff_api, events)
        seen, url = [], "/api/v1/online/?within=1000&page_size=4"
        while url:
            page = staff_api.get(url).json()
            assert page["count"] == 26  # the 25 plus the staff user the middleware tracked
            seen += [(row["ts"], row["user"]) for row in page["results"]]
            url = page["next"]
        assert [user for _, user in seen] == [user for _, user in sorted(seen, reverse=True)]
        assert sorted(user for _, user in seen) == sorted([f"u{i:02d}" for i in range(25)] + [str(staff.pk)])

    @pytest.mark.parametrize(
        "query", ["within=0", "within=86401", "within=x", "page_size=0", "page_size=501", "cursor=%%%"]
    )
    def test_online_bad_query_is_400(self, staff_api, query):
        response = staff_api.get(f"/api/v1/online/?{query}")
        assert response.status_code == 400
        assert query.split("=")[0] in response.json()

    def test_online_is_staff_only(self, member_api):
        assert member_api.get("/api/v1/online/").status_code == 403


class TestOperations:
    def test_redis_down_is_503_with_retry_after(self, staff_api):
        with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):
            for response in (post_events(staff_api, [{"user": "1"}]), staff_api.get("/api/v1/users/1/last-seen/")):
                assert response.status_code == 503
                assert response["Retry-After"] == "5"
                assert "unavailable" in response.json()["detail"]

    def test_healthz(self, client, db):
        body = client.get("/healthz").json()
        assert (body["redis"], body["database"]) == ("ok", "ok")
        with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):
            response = client.get("/healthz")
        assert response.status_code == 503 and response.json()["redis"].startswith("unavailable")

    def test_schema_and_offline_docs(self, client, db):
        schema = client.get("/api/v1/schema/?format=json")
        assert schema.status_code == 200
        paths = json.loads(schema.content)["paths"]
        assert {"/api/v1/events/", "/api/v1/users/{user}/last-seen/", "/api/v1/online/"} <= set(paths)
        docs = client.get("/api/v1/docs/")
        assert docs.status_code == 200
        assert b"cdn" not in docs.content.lower() and b"/static/drf_spectacular_sidecar/" in docs.content

    def test_metrics_errors_are_the_services_json(self, member_api, db):
        scraper = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
        for client, status in ((APIClient(), 401), (member_api, 403)):
            answer = client.get("/metrics", HTTP_ACCEPT=scraper)
            assert answer.status_code == status and answer["Content-Type"] == "application/json"
            assert answer.json()["detail"]
        refused = member_api.get("/metrics", HTTP_ACCEPT="application/xml")
        assert refused.status_code == 406 and refused.json()["detail"]

    def test_throttled_is_429_with_retry_after(self, staff_api, redis_client, mid_minute):
        with override_settings(ACTIVITY_THROTTLE_RATES={"ingest": "2/min"}):
            codes = [post_events(staff_api, [{"user": "1"}]).status_code for _ in range(3)]
            blocked = post_events(staff_api, [{"user": "1"}])
        assert codes == [202, 202, 429]
        assert blocked["Retry-After"] == "30"  # the rest of the fixed window
        assert "throttled" in blocked.json()["detail"]


@pytest.mark.urls("tests.host_site")
def test_under_a_prefix_the_app_takes_none_of_the_sites_names_or_paths(client, staff_api, db):
    assert (reverse("docs"), reverse("stats")) == ("/docs/", "/stats/")  # the site's own still
    assert reverse("activity:stats") == "/activity/api/v1/stats/"
    assert client.get("/docs/").content == b"<html><body>the site's own page</body></html>"
    assert staff_api.get("/activity/api/v1/stats/").status_code == 200
    assert client.get("/activity/healthz").json() == {"redis": "ok", "database": "ok"}
    assert staff_api.get("/activity/metrics").status_code == 200
    paths = client.get("/activity/api/v1/schema/?format=json").json()["paths"]
    assert "/activity/api/v1/stats/" in paths
    docs = client.get("/activity/api/v1/docs/").content
    assert b'"/activity/api/v1/schema/"' in docs and b"/static/drf_spectacular_sidecar/" in docs
    unknown = client.get("/activity/no-such-page/")
    assert unknown.status_code == 404 and unknown.json()["detail"]  # the app's JSON 404 under its prefix
    elsewhere = client.get("/no-such-page/")
    assert elsewhere.status_code == 404 and not elsewhere["Content-Type"].startswith("application/json")


# What a site's REST_FRAMEWORK may say; none of it changes the app's views (docs/api.md). The class
# attributes DRF copies from it at import are the install test's (tests/test_install.py); these are
# the ones it reads per request.
HOSTILE_REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.BrowsableAPIRenderer"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 2,
    "DEFAULT_THROTTLE_CLASSES": [],
    "DEFAULT_THROTTLE_RATES": {"anon": "1000/min"},
    "DEFAULT_VERSIONING_CLASS": "rest_framework.versioning.QueryParameterVersioning",
    "ALLOWED_VERSIONS": ["9"],
    "EXCEPTION_HANDLER": "rest_framework.views.exception_handler",
    "NON_FIELD_ERRORS_KEY": "errors",
    "URL_FORMAT_OVERRIDE": None,
}


@override_settings(REST_FRAMEWORK=HOSTILE_REST_FRAMEWORK)
def test_the_sites_rest_framework_changes_nothing(staff_api, member_api, redis_client, mid_minute):
    assert APIClient().get("/api/v1/stats/").status_code == 401
    assert member_api.get("/api/v1/stats/").status_code == 403
    body = staff_api.post(EVENTS, [1], format="json")
    assert body.status_code == 400 and body.json() == {
        "non_field_errors": ["Invalid data. Expected a dictionary, but got list."]
    }
    schema = APIClient().get("/api/v1/schema/?format=json")
    assert schema.status_code == 200 and schema["Content-Type"].startswith("application/vnd.oai.openapi+json")
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):
        down = staff_api.get("/api/v1/stats/")
    assert down.status_code == 503 and down["Retry-After"] == "5"
    with override_settings(ACTIVITY_THROTTLE_RATES={"anon": "2/min"}):
        codes = [APIClient(REMOTE_ADDR="198.51.100.9").get("/api/v1/docs/").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
