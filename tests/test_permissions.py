"""One permission model (docs/api.md): every operation of the REST API and every admin page of the
app needs one of the app's named permissions, the same for an operation and its admin counterpart.
``is_staff`` alone grants none (it only opens the admin's door), a superuser has them all, and a
signed-in user reads their own last seen, session, recommendations and export without any.

The matrix walks every route of ``activity.urls`` and every admin page the app registers (both
listed from the URLconf and the admin, so a new one without a row here fails) for each role:
anonymous, a plain user, a staff user without permissions, a staff user with each single
permission, a plain user with the view permission, and a superuser. The OpenAPI document names the
same permission per operation, and the migration carries ``view_dashboard`` grants over."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from celery import current_app
from django.apps import apps
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse
from rest_framework.authtoken.models import Token

from activity import calendar, clock, urls
from activity.events import Event
from activity.models import DailyRollup, Funnel, UserActivity
from activity.permissions import (
    DEFINE_FUNNELS,
    ERASE_ACTIVITY,
    EXPORT_ACTIVITY,
    INGEST_EVENTS,
    RUN_JOBS,
    VIEW_ACTIVITY,
)
from activity.services import flush, ingest
from activity.web.api import urls as api_urls
from tests.clients import APIClient, Client
from tests.conftest import APP_PERMISSIONS, with_permissions

TARGET = "target-user"  # someone else's activity: seen, with a session of /a then /b
ANYONE = frozenset()  # open: no permission, no sign-in
NOBODY = None  # refused even to a superuser (the read-only admin's add and delete pages)


@dataclass(frozen=True)
class Role:
    staff: bool = True
    superuser: bool = False
    permissions: tuple[str, ...] = ()

    def holds(self, needed: frozenset[str]) -> bool:
        return self.superuser or needed <= set(self.permissions)


ROLES: dict[str, Role | None] = {
    "anonymous": None,
    "plain user": Role(staff=False),
    "staff without permissions": Role(),
    **{f"staff with {name}": Role(permissions=(name,)) for name in APP_PERMISSIONS},
    "staff with view and erase": Role(permissions=(VIEW_ACTIVITY, ERASE_ACTIVITY)),
    "plain user with view": Role(staff=False, permissions=(VIEW_ACTIVITY,)),
    "superuser": Role(superuser=True),
}


@dataclass(frozen=True)
class Call:
    """One API route: how to call it, the permission it needs, and its answer when allowed."""

    method: str
    kwargs: dict[str, str] = field(default_factory=dict)
    needs: frozenset[str] = ANYONE
    success: int = 200
    own: bool = False  # the user named in the URL reads it without the permission
    query: str = ""
    body: dict | None = None


API: dict[str, Call] = {
    "events": Call("post", needs=frozenset({INGEST_EVENTS}), success=202, body={"events": [{"user": "walker"}]}),
    "last-seen": Call("get", {"user": TARGET}, frozenset({VIEW_ACTIVITY}), own=True),
    "session": Call("get", {"user": TARGET}, frozenset({VIEW_ACTIVITY}), own=True),
    "user-activity": Call("delete", {"user": "{erasable}"}, frozenset({ERASE_ACTIVITY}), success=204),
    "user-activity-export": Call("get", {"user": TARGET}, frozenset({EXPORT_ACTIVITY}), own=True),
    "recommendations": Call("get", {"user": TARGET}, frozenset({VIEW_ACTIVITY}), own=True),
    "next-pages": Call("get", needs=frozenset({VIEW_ACTIVITY}), query="?path=/a"),
    "online": Call("get", needs=frozenset({VIEW_ACTIVITY})),
    "pages-now": Call("get", needs=frozenset({VIEW_ACTIVITY})),
    "live": Call("get", needs=frozenset({VIEW_ACTIVITY})),  # without Accept: text/event-stream, JSON once
    "stats": Call("get", needs=frozenset({VIEW_ACTIVITY})),
    "retention": Call("get", needs=frozenset({VIEW_ACTIVITY})),
    "reports": Call("get", needs=frozenset({VIEW_ACTIVITY})),
    "report": Call("get", {"name": "most-active"}, frozenset({VIEW_ACTIVITY})),
    "group-members": Call("get", {"group_id": "{group}"}, frozenset({VIEW_ACTIVITY})),
    "group-active": Call("get", {"group_id": "{group}"}, frozenset({VIEW_ACTIVITY})),
    "funnels": Call(
        "post",
        needs=frozenset({DEFINE_FUNNELS}),
        success=201,
        body={"name": "signup", "steps": ["/a", "/b"], "window": 3600, "mode": "strict"},
    ),
    "funnel": Call("get", {"funnel_id": "{funnel}"}, frozenset({VIEW_ACTIVITY})),
    "schema": Call("get"),
    "docs": Call("get"),
    "metrics": Call("get", needs=frozenset({VIEW_ACTIVITY})),
    "healthz": Call("get"),
}


@dataclass(frozen=True)
class Page:
    """One admin page of the app: what it needs and its answer when allowed."""

    method: str
    needs: frozenset[str] | None
    success: int = 200
    args: tuple[str, ...] = ()
    data: dict = field(default_factory=dict)


def _row_pages(model: str, pk: str) -> dict[str, Page]:
    """The pages of a read-only ModelAdmin: list, one row and its history to whoever views activity;
    add and delete to nobody."""
    view = frozenset({VIEW_ACTIVITY})
    return {
        f"activity_{model}_changelist": Page("get", view),
        f"activity_{model}_change": Page("get", view, args=(pk,)),
        f"activity_{model}_history": Page("get", view, args=(pk,)),
        f"activity_{model}_add": Page("get", NOBODY),
        f"activity_{model}_delete": Page("post", NOBODY, args=(pk,)),
    }


def admin_pages(rollup: DailyRollup, funnel: str = "1") -> dict[str, Page]:
    return {
        "activity-dashboard": Page("get", frozenset({VIEW_ACTIVITY})),
        "activity_dashboard_changelist": Page("get", frozenset({VIEW_ACTIVITY})),
        "activity-dashboard-panel": Page("get", frozenset({VIEW_ACTIVITY})),
        "activity-dashboard-flush": Page("post", frozenset({RUN_JOBS}), 302),
        "activity-dashboard-rebuild": Page(
            "post", frozenset({RUN_JOBS}), 302, data={"report": "most-active", "period": "day"}
        ),
        **_row_pages("useractivity", TARGET),
        **_row_pages("dailyrollup", str(rollup.pk)),
        "activity_funnel_changelist": Page("get", frozenset({VIEW_ACTIVITY})),
        "activity_funnel_change": Page("get", frozenset({VIEW_ACTIVITY}), args=(funnel,)),
        "activity_funnel_history": Page("get", frozenset({VIEW_ACTIVITY}), args=(funnel,)),
        "activity_funnel_add": Page("get", frozenset({DEFINE_FUNNELS})),
        "activity_funnel_delete": Page("get", frozenset({DEFINE_FUNNELS}), args=(funnel,)),
    }


def route_names() -> set[str]:
    """Every named route of the one include, the API's included."""
    return {p.name for p in [*urls.urlpatterns, *api_urls.urlpatterns] if getattr(p, "name", None)}


def app_admin_page_names() -> set[str]:
    """Every named admin URL of the app's ModelAdmins."""
    return {
        pattern.name
        for model in apps.get_app_config("activity").get_models()
        if admin.site.is_registered(model)
        for pattern in admin.site.get_model_admin(model).urls
        if pattern.name
    }


def make_user(name: str, role: Role):
    users = get_user_model().objects
    user = users.create_user(name, is_staff=role.staff or role.superuser, is_superuser=role.superuser)
    return with_permissions(user, *role.permissions) if role.permissions else user


def seed(caller: str | None) -> tuple[dict[str, str], DailyRollup]:
    """Someone else's activity (a session from /a to /b, so /a has a next page), the caller's own,
    their rows in the database, a group and a Django user to erase (the URL arguments naming them),
    and a rollup."""
    now = clock.now()
    events = [Event(TARGET, now - 2, "/a"), Event(TARGET, now - 1, "/b")]
    ingest.record_events(events + ([Event(caller, now - 1, "/mine")] if caller else []))
    flush.flush()
    named = {
        "group": str(Group.objects.create(name="matrix").pk),
        "erasable": str(get_user_model().objects.create_user("erasable").pk),
        "funnel": str(Funnel.objects.create(name="matrix", steps=["/a", "/b"], window=60).pk),
    }
    return named, DailyRollup.objects.create(day=calendar.day_of(now) - timedelta(days=1))


def outcome(response) -> str:
    """The status, and for a redirect whether it goes to the admin's login page."""
    if response.status_code != 302:
        return str(response.status_code)
    return "302 login" if response["Location"].startswith(reverse("admin:login")) else "302"


def expected_api(role: Role | None, needs: frozenset[str], success: int) -> int:
    if not needs:
        return success
    if role is None:
        return 401
    return success if role.holds(needs) else 403


def expected_admin(role: Role | None, page: Page) -> str:
    if role is None or not role.staff:
        return "302 login"
    if page.needs is NOBODY or not role.holds(page.needs):
        return "403"
    return str(page.success)


def test_the_matrix_covers_every_route_and_every_admin_page():
    assert set(API) == route_names()
    assert set(admin_pages(DailyRollup(pk=1))) == app_admin_page_names()


@pytest.mark.parametrize("name", list(ROLES))
def test_every_route_and_admin_page_needs_its_one_permission(name, db, redis_client):
    role = ROLES[name]
    user = None if role is None else make_user(name.replace(" ", "-"), role)
    named, rollup = seed(None if user is None else str(user.pk))
    api, browser = APIClient(), Client()
    if user is not None:
        api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
        browser.force_login(user)

    walked = {}
    for route, call in API.items():
        url = (
            reverse(f"activity:{route}", kwargs={key: value.format(**named) for key, value in call.kwargs.items()})
            + call.query
        )
        answer = getattr(api, call.method)(url, call.body, format="json")
        walked[route] = (answer.status_code, expected_api(role, call.needs, call.success))
        if answer.status_code >= 400:
            assert answer["Content-Type"] == "application/json", route
        if call.own and user is not None:  # one's own data, whatever the permissions
            own = getattr(api, call.method)(reverse(f"activity:{route}", kwargs={"user": str(user.pk)}))
            walked[f"{route} (own)"] = (own.status_code, call.success)
    for page_name, page in admin_pages(rollup, named["funnel"]).items():
        answer = getattr(browser, page.method)(reverse(f"admin:{page_name}", args=page.args), page.data)
        walked[f"admin {page_name}"] = (outcome(answer), expected_admin(role, page))

    # The admin's erase action: on the list of rows (view), offered with the erase permission.
    UserActivity.objects.create(user_id="erase-me", first_seen=calendar.utc(0), last_seen=calendar.utc(0))
    chosen = {"action": "erase_activity", "_selected_action": ["erase-me"], "post": "yes"}
    browser.post(reverse("admin:activity_useractivity_changelist"), chosen)
    may_erase = role is not None and role.staff and role.holds(frozenset({VIEW_ACTIVITY, ERASE_ACTIVITY}))
    walked["admin erase action"] = (not UserActivity.objects.filter(user_id="erase-me").exists(), may_erase)
    index = browser.get(reverse("admin:index")).content.decode()
    may_view = role is not None and role.staff and role.holds(frozenset({VIEW_ACTIVITY}))
    walked["admin index lists the dashboard"] = (reverse("admin:activity-dashboard") in index, may_view)

    current_app.control.purge()  # the jobs the dashboard queued: this run's queue, no worker takes them
    wrong = {check: found for check, found in walked.items() if found[0] != found[1]}
    assert wrong == {}, f"{name}: (answered, expected) {wrong}"


def test_the_document_names_each_operations_permission(client, db):
    document = client.get("/api/v1/schema/?format=json").json()
    found = {}
    for route, call in API.items():
        kwargs = {key: f"{{{key}}}" for key in call.kwargs}
        path = reverse(f"activity:{route}", kwargs=kwargs).replace("%7B", "{").replace("%7D", "}")
        operation = document["paths"].get(path, {}).get(call.method)
        if operation is None:
            continue  # not an operation of the document: the schema, the docs page, metrics, healthz
        found[route] = (operation.get("x-permission"), operation.get("x-permission-self", False))
    expected = {route: (next(iter(call.needs)), call.own) for route, call in API.items() if route in found}
    assert found == expected
    assert set(found) == set(API) - {"schema", "docs", "metrics", "healthz"}
    operations = [op for ops in document["paths"].values() for op in ops.values()]
    assert all(operation["x-permission"].startswith("activity.") for operation in operations)


@pytest.mark.django_db(transaction=True)
def test_the_migration_carries_view_dashboard_grants_over():
    executor = MigrationExecutor(connection)
    executor.migrate([("activity", "0006_dashboard")])  # back: view_activity is view_dashboard again
    old = Permission.objects.get(content_type__app_label="activity", codename="view_dashboard")
    user = get_user_model().objects.create_user("dashboard-viewer", is_staff=True)
    user.user_permissions.add(old)
    group = Group.objects.create(name="dashboard-viewers")
    group.permissions.add(old)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes("activity"))
    assert not Permission.objects.filter(codename="view_dashboard").exists()
    assert get_user_model().objects.get(pk=user.pk).has_perm(VIEW_ACTIVITY)
    assert list(group.permissions.values_list("codename", flat=True)) == ["view_activity"]
