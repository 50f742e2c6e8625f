"""The service's settings with their defaults.

Each value is read from Django's settings on first use and kept until a setting changes (Django's
``setting_changed`` signal, which ``override_settings`` sends), so tests can override them while
the hot paths (a key name per user per request) do not pay a settings lookup each time.
Environment variables arrive as strings, so each value is coerced to its type.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

DEFAULTS: dict[str, Any] = {
    # The Redis holding the activity state: a development default (``check --deploy`` wants it set).
    "REDIS_URL": "redis://127.0.0.1:6379/0",
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
    # REDIS_URL names any node of a Redis Cluster (the store uses redis-py's RedisCluster).
    "ACTIVITY_REDIS_CLUSTER": False,
    # Last seen, its dirty set and its claimed set split into this many partitions (hash tags) by a
    # hash of the user id; 1 keeps the unpartitioned key names (see the last-seen migrate command).
    "ACTIVITY_LAST_SEEN_PARTITIONS": 1,
    # After a Redis failure the middleware skips tracking for this many seconds.
    "ACTIVITY_FAIL_OPEN_BACKOFF": 5,
    # Requests the middleware tracks.
    "ACTIVITY_TRACK_METHODS": ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"),
    "ACTIVITY_TRACK_MIN_STATUS": 200,
    "ACTIVITY_TRACK_MAX_STATUS": 399,
    "ACTIVITY_TRACK_EXCLUDE_PATHS": ("/static/", "/media/", "/healthz", "/metrics", "/favicon.ico"),
    # The middleware's activity waits up to this many milliseconds in its process and goes to
    # Redis in batches, one round trip each (0: each request sends its own before answering).
    "ACTIVITY_TRACK_BATCH_MS": 50,
    # A batch goes as soon as this many requests' activity waits; at most BUFFER_MAX wait (the
    # oldest dropped past it, while Redis is slow or away).
    "ACTIVITY_TRACK_BATCH_SIZE": 500,
    "ACTIVITY_TRACK_BUFFER_MAX": 20000,
    "ACTIVITY_MAX_PAGE_SIZE": 500,
    # Seconds a process remembers who it recorded as active (or visiting) on a day, so it does not
    # write that again on every request (0: write it every time).
    "ACTIVITY_DAY_WRITES_CACHE": 60,
    # Seconds a process keeps an API token and its user after reading them from the database.
    "ACTIVITY_TOKEN_CACHE_TTL": 30,
    # Proxies (addresses or networks) whose X-Forwarded-For is believed for the client address.
    "ACTIVITY_TRUSTED_PROXIES": (),
    # Scheduled jobs (activity/tasks/maintenance.py, beat schedule in activity/tasks/schedule.py).
    "ACTIVITY_FLUSH_BATCH": 2000,
    "ACTIVITY_JOB_LOCK_TTL": 60,
    "ACTIVITY_LAST_SEEN_RETENTION": 90 * 86400,
    "ACTIVITY_PRUNE_INTERVAL": 3600,
    "ACTIVITY_SWEEP_INTERVAL": 3600,
    "ACTIVITY_SWEEP_DEFAULT_TTL": 86400,
    # Anonymous visitors: a random first-party id cookie, unless consent says no.
    "ACTIVITY_VISITOR_COOKIES": True,
    # Dotted path to a callable(request) -> bool; False means no visitor cookie for that request.
    "ACTIVITY_VISITOR_CONSENT": "",
    "ACTIVITY_VISITOR_COOKIE_NAME": "act_vid",
    "ACTIVITY_VISITOR_COOKIE_AGE": 365 * 86400,
    "ACTIVITY_VISITOR_COOKIE_SECURE": True,
    # "First visit ever" hashes: 2**bits partitions (fixed once ids are stored; see docs/visitors.md).
    "ACTIVITY_VISITOR_PARTITION_BITS": 17,
    # Integer user ids up to this are counted exactly in per-day bitmaps (max_id / 8 bytes a day).
    "ACTIVITY_ACTIVE_BITMAP_MAX_ID": 2**26,
    # Navigation sessions: which responses count as page views, and which paths never do.
    "ACTIVITY_SESSION_CONTENT_TYPES": ("text/html",),
    "ACTIVITY_SESSION_KEEP_QUERY": False,
    "ACTIVITY_SESSION_EXCLUDE_PATHS": ("/admin/jsi18n/",),
    # Days the per-day page-view statistics are kept after their last write (week ones 7 more).
    "ACTIVITY_PAGE_STATS_DAYS": 8,
    # Distinct paths kept per day in the top-paths statistics (the most viewed survive).
    "ACTIVITY_PAGE_STATS_MAX_PATHS": 10000,
    # Page transitions (previous page -> next page, per day), counted by the page-view script, and
    # the next pages kept per page and day (the most frequent survive).
    "ACTIVITY_TRANSITIONS": True,
    "ACTIVITY_TRANSITIONS_MAX_NEXT": 50,
    # Recommendations: days of transitions merged, and the latest session pages they start from.
    "ACTIVITY_RECOMMEND_DAYS": 7,
    "ACTIVITY_RECOMMEND_RECENT_PAGES": 5,
    # Cached reports: stale copy kept this long past the TTL, rows of ranked reports, bounded wait
    # for another client's rebuild, and the beat refresh of reports read in the last READ_WINDOW.
    "ACTIVITY_REPORT_STALE": 30,
    "ACTIVITY_REPORT_TOP": 100,
    # Users kept per day and week as the ranked reports' candidates (at least REPORT_TOP).
    "ACTIVITY_REPORT_CANDIDATES": 1000,
    "ACTIVITY_REPORT_WAIT": 5.0,
    "ACTIVITY_REPORT_REFRESH_INTERVAL": 15,
    # New viewers' by-name entries wait in a pending set; each by-name read merges one slice of
    # them into the index, and each refresh run at most SLICES_PER_RUN slices per period. A slice
    # of 25 into a million-member index holds Redis about 0.4 ms (bench.reports_scale).
    "ACTIVITY_REPORT_MERGE_SLICE": 25,
    "ACTIVITY_REPORT_MERGE_SLICES_PER_RUN": 1000,
    "ACTIVITY_REPORT_READ_WINDOW": 600,
    # Group views (GET /api/v1/groups/<id>/members/): their lifetime.
    "ACTIVITY_GROUP_VIEW_TTL": 300,
    # Admin dashboard: seconds between live refreshes, and days in its charts (today included).
    "ACTIVITY_DASHBOARD_REFRESH": 5.0,
    "ACTIVITY_DASHBOARD_DAYS": 30,
    # Privacy (docs/privacy.md). Seconds an erased user id stays tombstoned: the flush and late
    # events skip it meanwhile (never less than what a dead flush's claim takes to come back).
    "ACTIVITY_ERASE_TOMBSTONE_TTL": 3600,
    # Browsers' opt-out signals: Sec-GPC: 1 / DNT: 1 mean no visitor cookie and no anonymous visit.
    "ACTIVITY_HONOR_GPC": True,
    "ACTIVITY_HONOR_DNT": True,
    # Crawlers and requests without a user agent are counted apart, not as visitors or page views;
    # site-specific patterns (regular expressions, case-insensitive) are added to the library's.
    "ACTIVITY_BOT_DETECTION": True,
    "ACTIVITY_BOT_PATTERNS": (),
    # Requests authenticated by an API credential (a DRF token) are machine traffic: last seen
    # only, unless this counts them as people (actives, page views, most-active).
    "ACTIVITY_COUNT_MACHINES": False,
}


@dataclass(frozen=True, slots=True)
class Setting:
    """One public setting, as the documentation's configuration table lists it (``docs/hooks.py``)."""

    name: str
    default: Any
    why: str  # one sentence: why a site would change it


SETTINGS: tuple[Setting, ...] = tuple(Setting(name, default, "") for name, default in DEFAULTS.items())


_TUPLES = {
    "ACTIVITY_TRUSTED_PROXIES",
    "ACTIVITY_TRACK_METHODS",
    "ACTIVITY_TRACK_EXCLUDE_PATHS",
    "ACTIVITY_SESSION_CONTENT_TYPES",
    "ACTIVITY_SESSION_EXCLUDE_PATHS",
}
# Regular expressions may hold commas: a string setting is one pattern (join several with |).
_PATTERNS = {"ACTIVITY_BOT_PATTERNS"}


# (larger, smaller): settings that may not be below another one, checked whenever either is read.
_AT_LEAST = (("ACTIVITY_REPORT_CANDIDATES", "ACTIVITY_REPORT_TOP"),)
# Settings that may not be below a number, checked whenever read (0 slices would never merge).
_MINIMUM = {
    "ACTIVITY_REPORT_MERGE_SLICE": 1,
    "ACTIVITY_REPORT_MERGE_SLICES_PER_RUN": 1,
    "ACTIVITY_TRACK_BATCH_MS": 0,
    "ACTIVITY_TRACK_BATCH_SIZE": 1,
    "ACTIVITY_TRACK_BUFFER_MAX": 1,
}

_cache: dict[str, Any] = {}


def get(name: str) -> Any:
    """Return setting ``name``, coerced to the type of its default."""
    try:
        return _cache[name]
    except KeyError:
        _cache[name] = value = _read(name)
        return value


def _read(name: str) -> Any:
    """The setting coerced; ImproperlyConfigured when it breaks an ``_AT_LEAST`` pair or a
    ``_MINIMUM`` (a wrong value fails where it is first used, not later as a wrong result)."""
    value = _coerce(name)
    if name in _MINIMUM and value < _MINIMUM[name]:
        raise ImproperlyConfigured(f"{name} ({value}) must be at least {_MINIMUM[name]}")
    for larger, smaller in _AT_LEAST:
        if name in (larger, smaller):
            big, small = (value, _coerce(smaller)) if name == larger else (_coerce(larger), value)
            if big < small:
                raise ImproperlyConfigured(f"{larger} ({big}) must be at least {smaller} ({small})")
    return value


def _coerce(name: str) -> Any:
    default = DEFAULTS[name]
    value = getattr(django_settings, name, default)
    if isinstance(default, bool) and isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    if name in _PATTERNS:
        return tuple(pattern for pattern in ([value] if isinstance(value, str) else value) if pattern)
    if name in _TUPLES:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        return tuple(value)
    return type(default)(value)


class _Settings:
    """Attribute access to the settings: ``conf.settings.ONLINE_WINDOW``. A value read once becomes
    an attribute, so later reads (dozens a request) are plain attribute reads."""

    def __getattr__(self, attr: str) -> Any:
        value = get(f"ACTIVITY_{attr}")
        setattr(self, attr, value)
        return value


settings = _Settings()


def _forget(*, setting: str, **kwargs: Any) -> None:
    _cache.pop(setting, None)
    vars(settings).pop(setting.removeprefix("ACTIVITY_"), None)


setting_changed.connect(_forget)
