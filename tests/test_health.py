"""``/healthz``: status for everyone, details (error text, flush backlog) only for staff."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import override_settings

from activity.models import UserActivity
from project.redis_server import free_port
from tests.clients import Client

pytestmark = pytest.mark.django_db


def staff_client(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


def test_anonymous_clients_get_the_status_only(redis_client):
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"redis": "ok", "database": "ok"}  # no flush internals


def test_anonymous_clients_never_see_hosts_or_error_text(redis_client):
    port = free_port()
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{port}/0"):
        response = Client().get("/healthz")
    assert response.status_code == 503 and response["Retry-After"]
    assert response.json() == {"redis": "unavailable", "database": "ok"}
    assert str(port) not in response.content.decode()


def test_staff_get_the_details(redis_client, staff):
    client = staff_client(staff)
    body = client.get("/healthz").json()
    assert body["redis"] == "ok" and set(body["flush"]) == {"backlog", "claimed", "lag"}
    port = free_port()
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{port}/0"):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["redis"].startswith("unavailable: ") and str(port) in response.json()["redis"]


def test_the_database_probe_reads_the_services_table(redis_client):
    """A database that answers SELECT 1 but cannot give the service's table is not ok."""
    table = UserActivity._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {table} RENAME TO {table}_away")
    try:
        response = Client().get("/healthz")
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table}_away RENAME TO {table}")
    assert response.status_code == 503 and response["Retry-After"]
    assert response.json() == {"redis": "ok", "database": "unavailable"}
    assert Client().get("/healthz").status_code == 200


def test_details_need_view_activity_not_is_staff(redis_client, django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_user("door-only", is_staff=True))
    assert client.get("/healthz").json() == {"redis": "ok", "database": "ok"}


def test_every_503_is_logged_at_error_with_its_traceback(redis_client, staff_api, caplog):
    """/healthz and the API, Redis away: each 503 leaves an ERROR record carrying the exception, on
    a logger under ``activity`` (shown by a site's default logging: Python's last-resort handler)."""
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"), caplog.at_level("ERROR"):
        assert Client().get("/healthz").status_code == 503
        assert staff_api.get("/api/v1/users/u/last-seen/").status_code == 503
    logged = [record for record in caplog.records if record.name.startswith("activity.")]
    assert {record.name for record in logged} == {"activity.health", "activity.web.api"}
    assert all(record.levelname == "ERROR" and record.exc_info for record in logged)
