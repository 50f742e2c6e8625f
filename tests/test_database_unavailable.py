"""A database that cannot serve (locked, gone, timing out) makes the API answer 503 with Retry-After,
never 500 (docs/api.md#errors), and the API serves again once it can. Against the real database in
that state: another connection holds its lock, and ours gives up after a short wait (SQLite's busy
timeout, PostgreSQL's lock_timeout), as a busy database under load would make it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from rest_framework.authtoken.models import Token

from activity import clock
from activity.events import Event
from activity.models import UserActivity
from activity.services import flush, ingest
from tests.clients import APIClient
from tests.conftest import with_permissions

pytestmark = pytest.mark.django_db(transaction=True)  # the lock holder must see committed rows
WAIT_MS = 100


@contextmanager
def locked_database() -> Iterator[None]:
    """Another connection holds the default database's lock on the tables the API reads until the
    block ends; ours waits ``WAIT_MS`` for a lock, then fails as a busy database does."""
    holder = connection.get_new_connection(connection.get_connection_params())
    options = connection.settings_dict["OPTIONS"]
    saved = dict(options)
    try:
        if connection.vendor == "sqlite":
            connection.close()  # reopened with the short busy timeout
            options["timeout"] = WAIT_MS / 1000
            holder.execute("BEGIN EXCLUSIVE")  # no other connection reads or writes
        else:
            tables = [model._meta.db_table for model in (Token, UserActivity, Group, get_user_model())]
            holder.cursor().execute(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE")
            with connection.cursor() as cursor:
                cursor.execute(f"SET lock_timeout = '{WAIT_MS}ms'")
        yield
    finally:
        holder.rollback()
        holder.close()
        options.clear()
        options.update(saved)
        connection.close()  # the next query reconnects with the usual settings


def test_a_locked_database_is_503_with_retry_after_then_the_api_serves_again(redis_client):
    ingest.record_events([Event("seen-user", clock.now(), "/a")])
    flush.flush()
    staff = with_permissions(get_user_model().objects.create_user("staff", is_staff=True))
    group = Group.objects.create(name="g")
    signed_in = APIClient()
    signed_in.force_authenticate(staff)
    by_token = APIClient(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=staff).key}")
    requests = [
        (by_token, "get", "/api/v1/stats/"),  # the token's lookup
        (signed_in, "get", "/api/v1/users/seen-user/activity/export/"),  # the user's row
        (signed_in, "delete", "/api/v1/users/seen-user/activity/"),  # the erase's first query
        (signed_in, "get", f"/api/v1/groups/{group.pk}/members/"),  # the group
    ]
    with locked_database():
        answers = [getattr(client, method)(url) for client, method, url in requests]
    for answer, (_, _, url) in zip(answers, requests, strict=True):
        assert answer.status_code == 503, (url, answer.status_code)
        assert answer["Retry-After"] == "5" and answer["Content-Type"] == "application/json"
        assert answer.json() == {"detail": "The database is unavailable; try again shortly."}
    assert UserActivity.objects.filter(user_id="seen-user").exists()  # the erase did not half happen
    assert [getattr(client, method)(url).status_code for client, method, url in requests] == [200, 200, 204, 200]
