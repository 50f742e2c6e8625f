"""A Content-Type charset Django accepts but cannot decode with (rot13, hex, base64, ...) is a 415 on
every path, the admin and /healthz included, never a 500: the served application (``project.asgi``,
driven here through ASGI as granian drives it) refuses it before Django builds the request, and the
API's JSON parser refuses it where the API is served otherwise. Ordinary charsets pass."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connections

from activity.web.charsets import usable_charset
from project.asgi import application
from tests.last_seen_state import stored

pytestmark = pytest.mark.django_db(transaction=True)  # the app runs on a thread and connection of its own

UNUSABLE = ["rot13", "base64", "hex", "idna", "punycode", "undefined", "utf-16"]
EVENTS = json.dumps({"events": [{"user": "x", "path": "/p"}]}).encode()


@pytest.fixture(autouse=True, scope="module")
def app_connection_closed() -> Iterator[None]:
    """The app's thread keeps its database connection between requests, as in a worker: closed after
    this module's tests, before the test database is dropped."""
    yield
    application.app.thread.submit(connections.close_all).result()  # Front -> OneThread


def asgi(method: str, path: str, query: bytes, headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
    """One request through ``project.asgi.application``: its status and body."""
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "scheme": "http",
        "headers": [(name.lower().encode(), value.encode()) for name, value in headers.items()]
        + [(b"host", b"localhost"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(application(scope, receive, send))
    return sent[0]["status"], b"".join(message.get("body", b"") for message in sent[1:])


def requests(content_type: str, token: str) -> dict[str, tuple[int, bytes]]:
    """Each kind of request the QA run sent with ``content_type``, each with a query string."""
    typed = {"Content-Type": content_type}
    api = {**typed, "Authorization": f"Token {token}"}
    return {
        "POST events": asgi("POST", "/api/v1/events/", b"x=1", api, EVENTS),
        "GET online": asgi("GET", "/api/v1/online/", b"page_size=1", api),
        "GET admin login": asgi("GET", "/admin/login/", b"next=/admin/", typed),
        "POST admin login": asgi("POST", "/admin/login/", b"next=/admin/", typed, b"username=a&password=b"),
        "GET healthz": asgi("GET", "/healthz", b"x=1", typed),
    }


@pytest.fixture
def token(staff) -> str:
    from rest_framework.authtoken.models import Token

    return Token.objects.create(user=staff).key


@pytest.mark.parametrize("charset", UNUSABLE)
def test_an_unusable_charset_is_415_everywhere_and_records_nothing(charset, token, redis_client):
    for name, (status, body) in requests(f"application/json; charset={charset}", token).items():
        assert status == 415, f"{name}: {status} {body[:300]!r}"
        assert charset in json.loads(body)["detail"], name
    assert stored(redis_client) == {}


@pytest.mark.parametrize("charset", ["utf-8", "UTF-8", "iso-8859-1", "windows-1252", "no-such-charset"])
def test_ordinary_and_unknown_charsets_pass(charset, token, redis_client):
    answers = requests(f"application/json; charset={charset}", token)
    assert answers["POST events"][0] == 202, answers["POST events"]
    for name in ("GET online", "GET admin login", "GET healthz"):
        assert answers[name][0] == 200, (name, answers[name])
    assert stored(redis_client).get("x") is not None


def test_the_json_parser_refuses_it_without_the_front(staff_api, redis_client):
    """A site serving the API through its own server: the app's JSON parser refuses it too."""
    response = staff_api.generic("POST", "/api/v1/events/", EVENTS, "application/json; charset=rot13")
    assert response.status_code == 415 and "rot13" in response.json()["detail"]
    assert stored(redis_client) == {}


def test_the_rule_matches_what_django_can_decode():
    assert all(usable_charset(name) for name in ("utf-8", "latin-1", "cp1252", "shift_jis", "ascii", "unknown-x"))
    assert not any(usable_charset(name) for name in UNUSABLE)
    assert settings.DEFAULT_CHARSET.lower() == "utf-8"
