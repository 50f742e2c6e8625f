"""The Redis connection the service uses, built from ``REDIS_URL``."""

from __future__ import annotations

import functools

import redis
from django.conf import settings as django_settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from activity import conf

# Errors that mean "Redis cannot be reached now" (as opposed to a bug or a bad command).
UNAVAILABLE = (redis.ConnectionError, redis.TimeoutError)


@functools.cache
def _client(url: str, timeout: float) -> redis.Redis:
    # No automatic retries: a dead Redis must fail fast (the middleware fails open and the API
    # answers 503), and a retried pipeline could apply its commands twice.
    return redis.Redis.from_url(
        url,
        decode_responses=True,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=30,
    )


def get_client() -> redis.Redis:
    """The shared client for ``REDIS_URL`` (one connection pool per URL and timeout)."""
    return _client(django_settings.REDIS_URL, conf.settings.REDIS_TIMEOUT)
