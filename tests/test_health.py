"""``/healthz``: status for everyone, details (error text, flush backlog) only for staff."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client, override_settings

from activity.models import UserActivity
from project.redis_server import free_port

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
