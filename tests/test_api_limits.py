"""Inputs at and past every documented limit get a JSON 400 or 404 naming the problem, and
nothing is written; no client input reaches Redis in a form it refuses (which was a 500)."""

from __future__ import annotations

import json

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group
from django.test import override_settings
from django.urls import include, path
from rest_framework.permissions import AllowAny

from activity import clock
from activity.web.api.pagination import CURSOR_PATTERN, MAX_CURSOR_LENGTH
from activity.web.api.serializers import MAX_PAGE, MAX_PAGE_SIZE
from activity.web.api.service_view import ServiceView
from tests.clients import Client
from tests.last_seen_state import stored
from tests.test_api import activity_keys

EVENTS = "/api/v1/events/"


def crash(request):
    raise RuntimeError("a bug")


class CrashingView(ServiceView):
    """One of the app's views, with a bug."""

    permission_classes = [AllowAny]

    def get(self, request):
        raise RuntimeError("a bug")


# This module is also a URLconf: a site with pages of its own (one of them crashing) that mounts the
# app under activity/, as docs/api.md shows, with one of the app's views that crashes, and no error
# handlers of its own.
urlpatterns = [
    path("admin/", admin.site.urls),
    path("crash/", crash),
    path("activity/api/v1/crash/", CrashingView.as_view()),
    path("activity/", include("activity.urls")),
]


def post_raw(api, body: str):
    return api.post(EVENTS, body, content_type="application/json")


def field_error(response, *field: str) -> list[str]:
    assert response.status_code == 400, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()
    for part in field:
        error = error[part]
    assert error and all(isinstance(reason, str) and reason for reason in error)
    return error


@pytest.fixture
def paged_data(member, staff_api, redis_client):
    """A live session of 3 page views for ``member``, and a group with ``member`` in it."""
    now = clock.now()
    events = [{"user": str(member.pk), "ts": now - i, "path": f"/p{i}"} for i in range(3)]
    assert staff_api.post(EVENTS, {"events": events}, format="json").status_code == 202
    group = Group.objects.create(name="g")
    group.user_set.add(member)
    return group


def page_urls(member, group) -> list[str]:
    return [
        f"/api/v1/users/{member.pk}/session/",
        "/api/v1/reports/most-active/",
        f"/api/v1/groups/{group.pk}/members/",
    ]


class TestPageBounds:
    def test_a_huge_page_is_400_not_a_redis_error(self, member, member_api, staff_api, paged_data):
        # A plain user can ask this of their own session.
        field_error(member_api.get(f"/api/v1/users/{member.pk}/session/?page=1000000000000000000"), "page")
        for url in page_urls(member, paged_data):
            field_error(staff_api.get(f"{url}?page=1000000000000000000"), "page")
            field_error(staff_api.get(f"{url}?page={MAX_PAGE + 1}"), "page")
            assert staff_api.get(f"{url}?page={MAX_PAGE}").status_code == 404

    def test_the_page_size_is_bounded_so_every_offset_fits_redis(self, member, staff_api, paged_data):
        assert MAX_PAGE * MAX_PAGE_SIZE < 2**63
        for url in page_urls(member, paged_data):
            field_error(staff_api.get(f"{url}?page_size={MAX_PAGE_SIZE + 1}"), "page_size")
            assert staff_api.get(f"{url}?page=1&page_size={MAX_PAGE_SIZE}").status_code == 200

    def test_past_the_end_is_404_for_sessions_reports_and_groups_alike(self, member, staff_api, paged_data):
        for url in page_urls(member, paged_data):
            assert staff_api.get(f"{url}?page=1&page_size=10").status_code == 200
            response = staff_api.get(f"{url}?page=2&page_size=10")
            assert response.status_code == 404 and response.json()["detail"]

    @pytest.mark.parametrize(
        "query",
        [
            "page=%D9%A5",  # Arabic-Indic five
            "page_size=%D9%A5",
            "page=%EF%BC%92",  # fullwidth two
            "page=01",
            "page=+1",
            "page=%201",
            "page=1_0",
            "page=1.0",
            "page=",
            "page_size=",
            "page=1&page=2",
        ],
    )
    def test_integers_are_plain_ascii_given_once(self, member, staff_api, paged_data, query):
        name = query.split("=")[0]
        for url in page_urls(member, paged_data):
            field_error(staff_api.get(f"{url}?{query}"), name)

    @pytest.mark.parametrize("group_id", ["01", "0", "00", "-1", "%D9%A1", "9223372036854775808"])
    def test_group_id_is_spelled_one_way(self, staff_api, paged_data, group_id):
        assert staff_api.get(f"/api/v1/groups/{paged_data.pk}/members/").status_code == 200
        field_error(staff_api.get(f"/api/v1/groups/{group_id}/members/"), "group_id")


class TestOnlineCursor:
    @pytest.mark.parametrize(
        "cursor",
        [
            pytest.param("1795690449.059", id="no-user"),
            pytest.param("_2", id="no-ts"),
            pytest.param("01_2", id="leading-zero"),
            pytest.param("1e9_2", id="exponent"),
            pytest.param("-1_2", id="negative"),
            pytest.param("NaN_2", id="nan"),
            pytest.param("inf_2", id="infinity"),
            pytest.param("1.5.5_2", id="two-points"),
            pytest.param("1" * 17 + "_2", id="17-digits"),
            pytest.param("1_a%20b", id="bad-user"),
            pytest.param("1_" + "u" * 65, id="user-too-long"),
            pytest.param("1_2%0A", id="trailing-newline"),
            pytest.param("", id="blank"),
            pytest.param("a" * 201, id="too-long"),
        ],
    )
    def test_bad_cursor_is_400(self, staff_api, redis_client, cursor):
        field_error(staff_api.get(f"/api/v1/online/?cursor={cursor}"), "cursor")

    @pytest.mark.parametrize("cursor", ["0_a", "9999999999999999.99999999999999999999_" + "z" * 64, "12_34"])
    def test_any_well_formed_cursor_is_a_position(self, staff_api, redis_client, cursor):
        assert staff_api.get(f"/api/v1/online/?cursor={cursor}").status_code == 200

    def test_a_cursor_from_a_next_link_still_works(self, staff_api, redis_client):
        now = clock.now()
        staff_api.post(EVENTS, {"events": [{"user": f"u{i}", "ts": now - i} for i in range(3)]}, format="json")
        first = staff_api.get("/api/v1/online/?page_size=2").json()
        following = staff_api.get(first["next"]).json()
        users = [row["user"] for row in first["results"] + following["results"]]
        assert len(users) == len(set(users)) and [user for user in users if user[0] == "u"] == ["u0", "u1", "u2"]


DEEP = 100_000


class TestIngestEdges:
    @pytest.mark.parametrize(
        ("body", "field"),
        [
            pytest.param('{"events": [{"user": "1", "ts": ' + "9" * 400 + "}]}", "ts", id="ts-400-digits"),
            pytest.param('{"events": [{"user": "1", "ts": -' + "9" * 400 + "}]}", "ts", id="ts-minus-400-digits"),
            pytest.param('{"events": [{"user": "1", "ts": -0}]}', "ts", id="ts-minus-zero"),
            pytest.param('{"events": [{"user": "1", "ts": -0.0}]}', "ts", id="ts-minus-zero-float"),
            pytest.param('{"events": [{"user": "1", "ts": 0}]}', "ts", id="ts-zero"),
            pytest.param('{"events": [{"user": "1", "ts": 1e-400}]}', "ts", id="ts-underflows-to-zero"),
            pytest.param('{"events": [{"user": "1", "ts": 0.0004}]}', "ts", id="ts-under-a-millisecond"),
            pytest.param('{"events": [{"user": "1", "ts": "2026-01-01T00:00:00"}]}', "ts", id="iso-without-offset"),
            pytest.param('{"events": [{"user": "1", "ts": "2026-01-01"}]}', "ts", id="iso-date-only"),
            pytest.param('{"events": [{"user": "1", "ts": "1970-01-01T00:00:00Z"}]}', "ts", id="iso-epoch"),
            pytest.param('{"events": [{"user": "1", "path": "/\\ud800"}]}', "path", id="path-lone-surrogate"),
            pytest.param('{"events": [{"user": "1", "path": "/\\udfff/x"}]}', "path", id="path-lone-low-surrogate"),
            pytest.param('{"events": [{"user": ' + "9" * 65 + "}]}", "user", id="user-65-digit-integer"),
        ],
    )
    def test_bad_value_is_400_naming_the_field_and_writes_nothing(self, staff_api, redis_client, body, field):
        field_error(post_raw(staff_api, body), "events", "0", field)
        assert activity_keys(redis_client) == []

    def test_iso_without_offset_says_to_add_one(self, staff_api, redis_client):
        reasons = field_error(post_raw(staff_api, '{"events": [{"user": "1", "ts": "2026-01-01T00:00:00"}]}'), "events")
        assert "offset such as Z" in reasons["0"]["ts"][0]

    def test_edges_that_are_accepted(self, staff_api, redis_client):
        events = [
            '{"user": "e1", "ts": 0.001}',
            '{"user": "e2", "ts": "2026-01-01T01:00:00+01:00"}',
            '{"user": "e3", "path": "/caf\\u00e9/\\ud83d\\ude00"}',  # a surrogate pair is one character
            '{"user": 1000000000000000000000}',
        ]
        assert post_raw(staff_api, '{"events": [' + ", ".join(events) + "]}").status_code == 202
        assert stored(redis_client).get("e1") == 0.001
        assert stored(redis_client).get("e2") == 1767225600.0
        assert stored(redis_client).get("1000000000000000000000") is not None

    @pytest.mark.parametrize(
        "body",
        [
            pytest.param('{"events": [{"user": "1", "ts": "bad", "ts": 1}]}', id="duplicate-in-event"),
            pytest.param('{"events": [{"user": "1"}], "events": [{"user": "2"}]}', id="duplicate-at-top"),
            # Deeper than any Python's parser follows (3.11 stops near 1,000 levels, 3.12 further).
            pytest.param("[" * DEEP + "]" * DEEP, id="array-nested-deep"),
            pytest.param('{"a":' * DEEP + "1" + "}" * DEEP, id="object-nested-deep"),
            pytest.param('{"events": [{"user": "1", "path": ' + "[" * DEEP + "]" * DEEP + "}]}", id="in-an-event"),
        ],
    )
    def test_unreadable_body_is_400_json_parse_error(self, staff_api, redis_client, body):
        response = post_raw(staff_api, body)
        assert response.status_code == 400
        assert response.json()["detail"].startswith("JSON parse error")
        assert activity_keys(redis_client) == []


class TestErrorsAreJson:
    def test_an_api_url_that_matches_nothing_is_a_json_404(self, staff_api, db):
        for url in ("/api/v1/users/a%2Fb/last-seen/", "/api/v1/nothing-here/", "/api/v1/groups/1/"):
            response = staff_api.get(url)
            assert response.status_code == 404
            assert response["Content-Type"] == "application/json"
            assert response.json() == {"detail": "Not found."}

    def test_a_request_django_refuses_is_a_json_400(self, client, db):
        # Refused before any view: the example project's own handler400, the one the app cannot be.
        response = client.get("/api/v1/stats/", HTTP_HOST="not-allowed.example")
        assert response.status_code == 400
        assert response.json() == {"detail": "Bad request."}

    def test_a_path_missing_its_slash_is_redirected_as_before(self, client, db):
        # The app's catch-all resolves every path, so it redirects where CommonMiddleware did.
        for path_, target in (("/api/v1/online", "/api/v1/online/"), ("/admin", "/admin/")):
            response = client.get(f"{path_}?a=1")
            assert (response.status_code, response["Location"]) == (301, f"{target}?a=1")

    @override_settings(ROOT_URLCONF=__name__)
    def test_under_the_apps_prefix_json_404_and_the_sites_own_pages_elsewhere(self, client, db):
        for url in ("/activity/api/v1/nothing-here/", "/activity/nothing-here", "/activity/users/a%2Fb/"):
            response = client.get(url)
            assert response.status_code == 404 and response.json() == {"detail": "Not found."}, url
        assert client.get("/activity/api/v1/online")["Location"] == "/activity/api/v1/online/"
        for url in ("/no-such-page/", "/activityx/"):
            response = client.get(url)
            assert response.status_code == 404 and response["Content-Type"].startswith("text/html"), url
        assert client.get("/admin/")["Location"].startswith("/admin/login/")  # the admin untouched

    @override_settings(ROOT_URLCONF=__name__, DATA_UPLOAD_MAX_NUMBER_FIELDS=10)
    def test_a_request_an_app_view_finds_suspicious_is_a_json_400(self, staff_api):
        query = "&".join(f"page={n}" for n in range(11))
        response = staff_api.get(f"/activity/api/v1/reports/most-active/?{query}")
        assert response.status_code == 400 and response.json() == {"detail": "Bad request."}

    @override_settings(ROOT_URLCONF=__name__)
    def test_a_crash_in_an_app_view_is_a_logged_json_500(self, db, caplog):
        client = Client(raise_request_exception=False)
        response = client.get("/activity/api/v1/crash/")
        assert response.status_code == 500
        assert response.json() == {"detail": "Server error."}
        (traceback,) = [record for record in caplog.records if record.name == "activity.web.api"]
        assert traceback.levelname == "ERROR" and traceback.exc_info[0] is RuntimeError
        (logged,) = [record for record in caplog.records if record.name == "django.request"]
        assert logged.levelname == "ERROR" and logged.status_code == 500  # as Django logs every 500
        assert client.get("/crash/")["Content-Type"].startswith("text/html")  # the site's own page


class TestDocument:
    """What schemathesis relies on, checked directly so a regression names its cause."""

    @pytest.fixture
    def document(self, client, db) -> dict:
        return json.loads(client.get("/api/v1/schema/?format=json").content)

    def test_every_operation_documents_its_errors_with_their_shape(self, document):
        for route, operations in document["paths"].items():
            for method, operation in operations.items():
                codes = set(operation["responses"])
                assert {"401", "403", "406", "429", "503"} <= codes, (method, route)
                assert ("400" in codes) == bool(operation.get("parameters") or operation.get("requestBody"))
                # A 404 where a well-formed request may name nothing: an id in the path, or a group or
                # page in the query (so schemathesis accepts it for a schema-valid request).
                names_a_thing = "{" in route or route in ("/api/v1/retention/", "/api/v1/pages/next/")
                assert ("404" in codes) == names_a_thing, (method, route)
                assert operation["responses"]["503"]["headers"]["Retry-After"]["required"]
        assert {"413", "415"} <= set(document["paths"]["/api/v1/events/"]["post"]["responses"])
        assert document["components"]["schemas"]["Error"]["required"] == ["detail"]

    def test_limits_are_in_the_document(self, document):
        event = document["components"]["schemas"]["Event"]["properties"]
        assert [branch["type"] for branch in event["user"]["oneOf"]] == ["string", "integer"]
        assert event["user"]["oneOf"][0]["pattern"] == "^[A-Za-z0-9_.:@-]{1,64}$"
        assert [branch["type"] for branch in event["ts"]["oneOf"]] == ["number", "string"]
        assert event["ts"]["oneOf"][0]["minimum"] == 0.001
        batch = document["components"]["schemas"]["EventBatch"]["properties"]["events"]
        assert (batch["minItems"], batch["maxItems"]) == (1, 1000)
        members = {
            p["name"]: p["schema"] for p in document["paths"]["/api/v1/groups/{group_id}/members/"]["get"]["parameters"]
        }
        assert (members["group_id"]["minimum"], members["group_id"]["maximum"]) == (1, 2**63 - 1)
        assert (members["page"]["minimum"], members["page"]["maximum"]) == (1, MAX_PAGE)
        assert (members["page_size"]["minimum"], members["page_size"]["maximum"]) == (1, 500)
        online = {p["name"]: p["schema"] for p in document["paths"]["/api/v1/online/"]["get"]["parameters"]}
        assert (online["within"]["minimum"], online["within"]["maximum"]) == (1, 86400)
        assert online["cursor"]["maxLength"] == MAX_CURSOR_LENGTH
        assert online["cursor"]["pattern"] == f"^{CURSOR_PATTERN}$"
