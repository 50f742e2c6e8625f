"""The public settings, each with a default and why a site would change it; anything else tunable
is a named constant in the module that uses it. A value is read on first use and forgotten on
``setting_changed``; strings are coerced to the default's type (environment variables work), and a
bad value raises ``ImproperlyConfigured``, which the check ``activity.E006`` reports at start-up."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed


@dataclass(frozen=True, slots=True)
class Setting:
    """One public setting, as the documentation's configuration table lists it (``docs/hooks.py``)."""

    name: str
    default: Any
    why: str  # why a site would change it
    minimum: float | None = None


DAY = 86400

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "REDIS_URL",
        "redis://127.0.0.1:6379/0",
        "The Redis holding the activity state; `check --deploy` errors while it is left to this development default. "
        "`redis+sentinel://host:port,host:port/service/db` follows the primary Redis Sentinel names "
        "([High availability](sentinel.md)).",
    ),
    Setting("ACTIVITY_KEY_PREFIX", "act:", "Give each site or environment sharing a Redis database its own prefix."),
    Setting("ACTIVITY_REDIS_CLUSTER", False, "`REDIS_URL` names any node of a Redis Cluster."),
    Setting(
        "ACTIVITY_REDIS_TIMEOUT",
        0.5,
        "Seconds a Redis call may take before Redis counts as down (the API answers 503, tracking pauses); "
        "raise it for a distant Redis.",
        minimum=0.001,
    ),
    Setting(
        "ACTIVITY_LAST_SEEN_PARTITIONS",
        1,
        "Spread last seen over this many hash tags, so a Redis Cluster spreads its writes; after a "
        "change, `manage.py activity_upgrade` moves what is stored.",
        minimum=1,
    ),
    Setting("ACTIVITY_ONLINE_WINDOW", 300, "Seconds since last seen that count as online.", minimum=1),
    Setting("ACTIVITY_SESSION_WINDOW", 60, "Idle seconds that end a navigation session.", minimum=1),
    Setting("ACTIVITY_SESSION_MAX_PAGES", 50, "Pages kept per navigation session (the oldest go).", minimum=1),
    Setting(
        "ACTIVITY_MAX_FUTURE_SKEW",
        60,
        "Seconds an event's `ts` may lie in the future; raise it for clients whose clocks drift.",
        minimum=0,
    ),
    Setting("ACTIVITY_MAX_BATCH", 1000, "Events per ingest request or `activity.record_events` task.", minimum=1),
    Setting(
        "ACTIVITY_REPORT_TTL",
        60,
        "Seconds a cached report stays fresh: lower for fresher reports, higher for fewer rebuilds.",
        minimum=1,
    ),
    Setting(
        "ACTIVITY_FLUSH_INTERVAL",
        10,
        "Seconds between flushes of last seen to the database: how far the database lags Redis.",
        minimum=1,
    ),
    Setting(
        "ACTIVITY_LAST_SEEN_RETENTION",
        90 * DAY,
        "Seconds Redis keeps an idle user's last seen (the database keeps it for good): memory against how "
        "far back the online list and group views read from Redis.",
        minimum=1,
    ),
    Setting(
        "ACTIVITY_PAGE_STATS_DAYS",
        8,
        "Days page views, paths, transitions and the reports' per-day inputs stay in Redis: memory against history.",
        minimum=1,
    ),
    Setting(
        "ACTIVITY_TRACK_EXCLUDE_PATHS",
        ("/static/", "/media/", "/healthz", "/metrics", "/favicon.ico"),
        "Path prefixes the middleware never tracks (comma-separated in the environment): static files, probes "
        "(the app's own `healthz` and `metrics` never count, wherever the site mounts them).",
    ),
    Setting(
        "ACTIVITY_TRUSTED_PROXIES",
        (),
        "Proxies (addresses or networks) whose `X-Forwarded-For` is believed for the client's address.",
    ),
    Setting(
        "ACTIVITY_HONOR_GPC",
        True,
        "Honour browsers' opt-out signals (`Sec-GPC: 1`, `DNT: 1`): no visitor cookie and no anonymous visit.",
    ),
    Setting(
        "ACTIVITY_VISITOR_COOKIES",
        True,
        "Count anonymous visitors with a random first-party cookie; off where no consent is ever given.",
    ),
    Setting(
        "ACTIVITY_VISITOR_CONSENT",
        "",
        "Dotted path to a `callable(request) -> bool`, the site's consent answer: False means no visitor cookie.",
    ),
    Setting(
        "ACTIVITY_BOT_PATTERNS",
        (),
        "Regular expressions (case-insensitive) of the site's own crawlers and monitors, counted as bots "
        "besides the ones the library knows.",
    ),
    Setting(
        "ACTIVITY_COUNT_MACHINES",
        False,
        "Count requests authenticated by an API token as a person's (active users, page views) rather than "
        "a machine's.",
    ),
    Setting(
        "ACTIVITY_THROTTLE_RATES",
        {"user": "6000/min", "anon": "120/min", "ingest": "6000/min"},
        "Requests per client and window of the API's throttle scopes (`user`: signed-in callers, `anon`: "
        "anonymous requests and failed authentications, by address, `ingest`: the ingest endpoint), as DRF "
        "writes rates (`120/min`); the scopes given replace the defaults', a rate of `None` lifts the limit "
        "(JSON in the environment).",
    ),
    Setting(
        "ACTIVITY_TIME_ZONE",
        "",
        "The IANA zone (`Europe/Berlin`) whose local midnight cuts every day, week and month: DAU/WAU/MAU, "
        "first visits, page statistics, reports, rollups, the dashboard; empty: Django's `TIME_ZONE`. Days "
        "already begun keep their keys (see below).",
    ),
    Setting(
        "ACTIVITY_TRANSITIONS",
        True,
        "Count page transitions (next-page picks, recommendations, the dashboard's 'where next'); off saves "
        "their Redis work and memory.",
    ),
)
SETTINGS_BY_NAME = {setting.name: setting for setting in SETTINGS}

# Comma-separated in the environment. Regular expressions may hold commas: a string is one pattern.
_TUPLES = {"ACTIVITY_TRUSTED_PROXIES", "ACTIVITY_TRACK_EXCLUDE_PATHS"}
_PATTERNS = {"ACTIVITY_BOT_PATTERNS"}
# A rate as DRF writes one: requests per second, minute, hour or day ("120/min").
RATE_RE = re.compile(r"[0-9]+/[smhd][a-z]*")

_cache: dict[str, Any] = {}


def get(name: str) -> Any:
    """Setting ``name``, coerced to the type of its default; ``ImproperlyConfigured`` when it cannot
    be, or is below its minimum."""
    try:
        return _cache[name]
    except KeyError:
        _cache[name] = value = _read(SETTINGS_BY_NAME[name])
        return value


def _read(setting: Setting) -> Any:
    value = getattr(django_settings, setting.name, setting.default)
    try:
        value = _coerce(setting, value)
    except (TypeError, ValueError) as error:
        shown = redacted(value) if setting.name == "REDIS_URL" and isinstance(value, str) else value
        raise ImproperlyConfigured(f"{setting.name} = {shown!r}: {error}") from None
    if setting.minimum is not None and value < setting.minimum:
        raise ImproperlyConfigured(f"{setting.name} = {value!r}: it must be at least {setting.minimum}")
    return value


def _coerce(setting: Setting, value: Any) -> Any:
    default = setting.default
    if isinstance(default, bool):
        if isinstance(value, str):
            return value.strip().lower() in {"1", "true", "yes", "on"}
        return bool(value)
    if setting.name in _PATTERNS:
        return tuple(pattern for pattern in ([value] if isinstance(value, str) else value) if pattern)
    if setting.name == "ACTIVITY_TIME_ZONE":
        return _zone(value)
    if setting.name == "REDIS_URL":
        return _redis_url(str(value))
    if isinstance(default, dict):
        return _rates(default, json.loads(value) if isinstance(value, str) else value)
    if setting.name in _TUPLES:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        return tuple(value)
    return type(default)(value)


def _rates(default: dict[str, str], given: Any) -> dict[str, str | None]:
    """The default rates with the given scopes' in their place, each a DRF rate or None."""
    rates = {**default, **dict(given)}
    for scope, rate in rates.items():
        if rate is not None and not (isinstance(rate, str) and RATE_RE.fullmatch(rate)):
            raise ValueError(f"the rate of {scope!r} is not a rate such as '120/min' (or None)")
    return rates


def _zone(name: Any) -> ZoneInfo:
    """The zone ``name`` names; empty: the one of Django's ``TIME_ZONE`` (UTC when that is None)."""
    name = name or django_settings.TIME_ZONE or "UTC"
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{name!r} is not a time zone of the IANA database (a name such as 'Europe/Berlin' or 'UTC')"
        ) from None


def _redis_url(url: str) -> str:
    """``url`` as it is; a Sentinel URL must be whole (``parse_sentinel_url`` says what is wrong) and
    cannot be a cluster's."""
    if parse_sentinel_url(url) is not None and get("ACTIVITY_REDIS_CLUSTER"):
        raise ValueError("a Sentinel URL names a primary and its replicas, not a cluster: ACTIVITY_REDIS_CLUSTER is on")
    return url


class _Settings:
    """``conf.settings.ONLINE_WINDOW``: a value read once becomes an attribute, so the dozens of
    reads a request makes are plain attribute reads."""

    def __getattr__(self, attr: str) -> Any:
        value = get(f"ACTIVITY_{attr}")
        setattr(self, attr, value)
        return value


settings = _Settings()


# A change of one is a change of the other: Django's settings some of ours default to, and settings
# another's check reads (a Sentinel REDIS_URL is an error with ACTIVITY_REDIS_CLUSTER on).
_FOLLOWS = {"TIME_ZONE": "ACTIVITY_TIME_ZONE", "ACTIVITY_REDIS_CLUSTER": "REDIS_URL"}


def _forget(*, setting: str, **kwargs: Any) -> None:
    for name in (setting, _FOLLOWS.get(setting, setting)):
        _cache.pop(name, None)
        vars(settings).pop(name.removeprefix("ACTIVITY_"), None)


setting_changed.connect(_forget)


def redacted(url: str) -> str:
    """``url`` without its password, fit for a message or a log line."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not even a URL's shape: show none of what may be a password
        head, at, tail = url.rpartition("@")
        return f"{head.partition('://')[0]}://***@{tail}" if at else url
    if password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{password}@", ":***@", 1)).geturl()


# --- Redis Sentinel ----------------------------------------------------------------------------
# A REDIS_URL of this scheme names the sentinels of a primary and its replicas instead of one server:
# the store asks them where the primary is on every new connection, so it follows a failover.

SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379  # a sentinel's port when the URL gives none (Redis's default)
_SENTINEL_FORM = f"{SENTINEL_SCHEME}://[[user]:password@]host:port[,host:port...]/service_name[/db]"


@dataclass(frozen=True, slots=True)
class SentinelURL:
    """A ``redis+sentinel://`` URL taken apart: where the sentinels listen, the name they monitor the
    primary under, the database, and the credentials of the primary (the sentinels get none)."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None


def parse_sentinel_url(url: str) -> SentinelURL | None:
    """``url`` taken apart when it is a Sentinel URL, None when it is any other; ``ValueError``
    saying what is wrong with a Sentinel URL that is not whole, so start-up names it (E006)."""
    scheme, found, rest = url.partition("://")
    if not found or scheme.lower() != SENTINEL_SCHEME:
        return None
    if "?" in rest or "#" in rest:
        raise _wrong("it takes no query or fragment")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username, password = unquote(user) or None, unquote(secret) if colon else None
    sentinels = tuple(_sentinel_address(address) for address in hosts.split(","))
    service, _, db = path.partition("/")
    if not service:
        raise _wrong("it names no service (the name the sentinels monitor the primary under)")
    db = db.rstrip("/")
    if db and not (db.isascii() and db.isdigit()):
        raise _wrong(f"the database {db!r} is not a number")
    return SentinelURL(sentinels, unquote(service), int(db or 0), username, password)


def _wrong(what: str) -> ValueError:
    return ValueError(f"{what}; a Sentinel URL is {_SENTINEL_FORM}")


def _sentinel_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``; the port defaults to 26379) as a pair."""
    if address.startswith("["):
        host, bracket, port = address[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            raise _wrong(f"the sentinel address {address!r} is not [IPv6]:port")
        port = port[1:]
    else:
        host, _, port = address.partition(":")
    if not host:
        raise _wrong(f"a sentinel address is empty ({address!r})")
    if not port:
        return host, SENTINEL_PORT
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise _wrong(f"the port of the sentinel {address!r} is not a port number")
    return host, int(port)


def celery_redis(url: str) -> tuple[str, dict[str, Any]]:
    """What Celery's broker or result backend setting takes for a Redis at ``url``, and the transport
    options to go with it: a Sentinel URL becomes kombu's form (``sentinel://host:port/db;...``, every
    sentinel with the database and password) with ``{"master_name": service}``, so the worker follows
    the primary as the store does; any other URL, or a Sentinel URL that is not whole (E006 names it),
    comes back as it is, with no options. For example, in a site's settings::

        CELERY_REDIS = "redis+sentinel://h1:26379,h2:26379/mymaster/1"  # beside REDIS_URL's /0
        CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS = celery_redis(CELERY_REDIS)
        CELERY_RESULT_BACKEND, CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = celery_redis(CELERY_REDIS)
    """
    try:
        found = parse_sentinel_url(url)
    except ValueError:
        found = None
    if found is None:
        return url, {}
    credentials = quote(found.username or "", safe="")
    if found.password is not None:
        credentials += ":" + quote(found.password, safe="")
    credentials += "@" if credentials else ""
    chunks = [
        f"sentinel://{credentials}{f'[{host}]' if ':' in host else host}:{port}/{found.db}"
        for host, port in found.sentinels
    ]
    return ";".join(chunks), {"master_name": found.service}
