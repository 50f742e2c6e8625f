"""Django's Redis cache backend behind the store's error boundary.

DRF keeps its throttle counters in Django's cache, which lives in Redis too. With Django's own
backend an unavailable Redis would surface as a redis-py error (a 500); with this one it is
``StoreUnavailable``, like every other Redis call, so the API answers 503.
"""

from __future__ import annotations

from typing import Any

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient

from activity.store.client import Client


class _TranslatingCacheClient(RedisCacheClient):
    def __init__(self, servers: list[str], **options: Any) -> None:
        super().__init__(servers, **options)
        self._client = Client


class RedisCache(DjangoRedisCache):
    """``CACHES = {"default": {"BACKEND": "activity.store.cache.RedisCache", "LOCATION": REDIS_URL}}``."""

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = _TranslatingCacheClient
