"""Shared fixtures: the store's real Redis client, per-test key clean-up, users and API clients."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from activity import conf, rate_limits
from activity.api.authentication import tokens
from activity.middleware import fail_open
from activity.store.client import get_client


def delete_own_keys(client) -> None:
    """Delete keys under this run's prefix only; never anything else on the server."""
    batch = list(client.scan_iter(match=f"{conf.settings.KEY_PREFIX}*", count=1000))
    for start in range(0, len(batch), 500):
        client.delete(*batch[start : start + 500])


@pytest.fixture
def redis_client():
    client = get_client()
    delete_own_keys(client)
    yield client
    delete_own_keys(client)


def _forget_process_state() -> None:
    fail_open.reset()
    rate_limits.blocked.clear()
    tokens.clear()


@pytest.fixture(autouse=True)
def _clean_state(redis_client):
    _forget_process_state()
    yield
    _forget_process_state()


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_user("staff", is_staff=True)


@pytest.fixture
def member(db):
    return get_user_model().objects.create_user("member")


@pytest.fixture
def staff_api(staff) -> APIClient:
    api = APIClient()
    api.force_authenticate(staff)
    return api


@pytest.fixture
def member_api(member) -> APIClient:
    api = APIClient()
    api.force_authenticate(member)
    return api
