"""Throttles: one counter per client and window, X-Forwarded-For believed only from trusted proxies,
bounded keys, failed authentication counted as anonymous and refused once over while a valid token
from the same address is served, and the OpenAPI document and docs page stay up while Redis is down."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from rest_framework.authtoken.models import Token

from activity import permissions
from activity.store import keys
from project.redis_server import free_port
from tests.clients import Client
from tests.conftest import with_permissions

pytestmark = pytest.mark.django_db
SCHEMA = "/api/v1/schema/"
STATS, EVENTS = "/api/v1/stats/", "/api/v1/events/"


def rates(**overrides: str) -> override_settings:
    """The default rates, with ``overrides``'s scopes in their place."""
    return override_settings(ACTIVITY_THROTTLE_RATES=overrides)


def counters(redis_client) -> dict[str, str]:
    found = redis_client.scan_iter(match=f"{keys.prefix()}rate:*", count=1000)
    return {key: redis_client.get(key) for key in found}


def statuses(client: Client, n: int, **headers: str) -> list[int]:
    return [client.get(SCHEMA, **headers).status_code for _ in range(n)]


def test_a_rotating_forwarded_header_does_not_make_a_new_client(redis_client, mid_minute):
    with rates(anon="3/min"):
        codes = [
            Client().get(SCHEMA, HTTP_X_FORWARDED_FOR=f"203.0.113.{n}", REMOTE_ADDR="198.51.100.7").status_code
            for n in range(5)
        ]
    assert codes == [200, 200, 200, 429, 429]
    # One counter, not one list entry per request; the refused requests never reached Redis.
    assert list(counters(redis_client).values()) == ["3"]


def test_a_trusted_proxy_forwards_the_client_address(redis_client, mid_minute):
    proxy = {"REMOTE_ADDR": "10.1.2.3"}
    with rates(anon="2/min"), override_settings(ACTIVITY_TRUSTED_PROXIES="10.0.0.0/8"):
        first = statuses(Client(), 3, HTTP_X_FORWARDED_FOR="203.0.113.1, 10.9.9.9", **proxy)
        second = statuses(Client(), 2, HTTP_X_FORWARDED_FOR="spoofed, 203.0.113.2", **proxy)
    assert first == [200, 200, 429]  # the client behind two trusted hops
    assert second == [200, 200]  # another client; the untrusted left part is never read
    assert sorted(key.split(":")[-2] for key in counters(redis_client)) == ["203.0.113.1", "203.0.113.2"]


def test_keys_stay_short_whatever_the_headers(redis_client):
    with rates(anon="100/min"), override_settings(ACTIVITY_TRUSTED_PROXIES="127.0.0.1"):
        Client().get(SCHEMA, HTTP_X_FORWARDED_FOR="x" * 4000, REMOTE_ADDR="127.0.0.1")
        Client().get(SCHEMA, HTTP_X_FORWARDED_FOR="1" * 4000, REMOTE_ADDR="198.51.100.7")
    found = counters(redis_client)
    assert len(found) == 2 and all(len(key) < len(keys.prefix()) + 80 for key in found)
    assert all(0 < redis_client.ttl(key) <= 61 for key in found)


def test_schema_and_docs_stay_up_while_redis_is_down():
    with override_settings(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0"):
        assert Client().get(SCHEMA).status_code == 200
        assert Client().get("/api/v1/docs/").status_code == 200


def test_a_valid_token_is_authenticated_whatever_bad_tokens_spent_from_its_address(redis_client, mid_minute):
    """Bad tokens count as anonymous requests of their address, refused (429) once it is over its
    limit; a valid token from that address, one this process has not read yet, is authenticated
    before any anonymous limit applies: one client retrying bad tokens behind a proxy locks no one
    else out."""
    reader = with_permissions(get_user_model().objects.create_user("reader"), permissions.VIEW_ACTIVITY)
    valid = Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=reader).key}")

    def bogus(n: int) -> Client:
        return Client(HTTP_AUTHORIZATION=f"Token {n:040x}")

    with rates(anon="3/min"):
        counted = [bogus(0).get(STATS), Client().get(STATS), bogus(1).post(EVENTS, {}, content_type="application/json")]
        refused = [bogus(n).get(STATS) for n in range(2, 12)]
        anonymous = Client().get(STATS)
        authenticated = valid.get(STATS)
        other_address = bogus(12).get(STATS, REMOTE_ADDR="198.51.100.7")
    assert [answer.status_code for answer in counted] == [401, 401, 401]
    assert {answer.status_code for answer in refused} == {429}
    assert 0 < int(refused[-1]["Retry-After"]) <= 30 and "throttled" in refused[-1].json()["detail"]
    assert anonymous.status_code == 429 and other_address.status_code == 401
    assert authenticated.status_code == 200 and "active" in authenticated.json()
    found = {key.rsplit(":", 2)[-2]: count for key, count in counters(redis_client).items() if ":anon:" in key}
    assert found == {"127.0.0.1": "3", "198.51.100.7": "1"}  # the refused ones are not counted
