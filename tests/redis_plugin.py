"""Pytest plugin (loaded with ``-p``): picks the Redis for the run before Django reads settings.

``TEST_REDIS_URL`` set: use that server. Otherwise a private throwaway redis-server is started for
the run, so counting tests (INFO commandstats) see only this run's commands and nothing of anyone
else's data is ever touched. Either way every key gets a per-run prefix, and Celery a per-run queue.
"""

from __future__ import annotations

import os
import secrets

import pytest

from project.redis_server import PrivateRedis

_private: PrivateRedis | None = None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    global _private
    run = secrets.token_hex(4)
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        _private = PrivateRedis().start()
        url = _private.url
    os.environ["REDIS_URL"] = url
    os.environ.pop("CELERY_BROKER_URL", None)
    os.environ.pop("CELERY_RESULT_BACKEND", None)
    os.environ["ACTIVITY_KEY_PREFIX"] = f"acttest:{run}:"
    os.environ["CELERY_TASK_DEFAULT_QUEUE"] = f"acttest-{run}"
    return (yield)


def pytest_unconfigure(config):
    if _private is not None:
        _private.stop()


@pytest.fixture(scope="session")
def private_redis() -> PrivateRedis | None:
    """The run's private server (None when ``TEST_REDIS_URL`` points at a shared one)."""
    return _private
