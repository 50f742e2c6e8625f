"""The service's settings with their defaults.

Read on every access (not cached at import) so ``override_settings`` in tests and per-environment
values both work. Environment variables arrive as strings, so each value is coerced to its type.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings

DEFAULTS: dict[str, Any] = {
    "ACTIVITY_KEY_PREFIX": "act:",
    "ACTIVITY_ONLINE_WINDOW": 300,
    "ACTIVITY_SESSION_WINDOW": 60,
    "ACTIVITY_SESSION_MAX_PAGES": 50,
    "ACTIVITY_MAX_FUTURE_SKEW": 60,
    "ACTIVITY_MAX_BATCH": 1000,
    "ACTIVITY_REPORT_TTL": 60,
    "ACTIVITY_FLUSH_INTERVAL": 10,
    # Seconds a Redis call may take before it counts as Redis being down.
    "ACTIVITY_REDIS_TIMEOUT": 0.5,
    # After a Redis failure the middleware skips tracking for this many seconds.
    "ACTIVITY_FAIL_OPEN_BACKOFF": 5,
    # Requests the middleware tracks.
    "ACTIVITY_TRACK_METHODS": ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"),
    "ACTIVITY_TRACK_MIN_STATUS": 200,
    "ACTIVITY_TRACK_MAX_STATUS": 399,
    "ACTIVITY_TRACK_EXCLUDE_PATHS": ("/static/", "/media/", "/healthz", "/favicon.ico"),
    "ACTIVITY_MAX_PAGE_SIZE": 500,
    # Group views (GET /api/v1/groups/<id>/members/): lifetime, and how live updates reach them.
    "ACTIVITY_GROUP_VIEW_TTL": 300,
    "ACTIVITY_GROUP_VIEW_STRATEGY": "lua",
    "ACTIVITY_GROUP_VIEW_TTL_MARGIN": 1.0,
}

_TUPLES = {"ACTIVITY_TRACK_METHODS", "ACTIVITY_TRACK_EXCLUDE_PATHS"}


def get(name: str) -> Any:
    """Return setting ``name``, coerced to the type of its default."""
    default = DEFAULTS[name]
    value = getattr(django_settings, name, default)
    if name in _TUPLES:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        return tuple(value)
    return type(default)(value)


class _Settings:
    """Attribute access to the settings: ``conf.settings.ONLINE_WINDOW``."""

    def __getattr__(self, attr: str) -> Any:
        return get(f"ACTIVITY_{attr}")


settings = _Settings()
