"""System checks (tag ``activity``): a wrong setup is reported by ``manage.py check``, ``runserver``
and ``migrate`` rather than found later as missing data. Those checks run before every management
command (``createsuperuser`` included), so they read settings only: neither the database nor Redis.
The checks that read Redis are deploy checks, run by ``check --deploy``: one round trip of CONFIG GET
(whether Redis answers, its eviction policy and persistence)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from celery import current_app
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from activity import conf

TAG = "activity"
ACTIVITY_MIDDLEWARE = "activity.web.middleware.ActivityMiddleware"
AUTH_MIDDLEWARE = "django.contrib.auth.middleware.AuthenticationMiddleware"
FLUSH_TASK = "activity.flush"
DEFAULT_REDIS_URL = conf.SETTINGS_BY_NAME["REDIS_URL"].default


def _position(chain: Sequence[str], base_path: str) -> int | None:
    """Index of the first middleware in ``chain`` that is ``base_path`` or a subclass of it."""
    base = import_string(base_path)
    for index, path in enumerate(chain):
        if path == base_path:
            return index
        try:
            found = import_string(path)
        except ImportError:
            continue  # Django reports an unimportable middleware itself
        if isinstance(found, type) and issubclass(found, base):
            return index
    return None


def middleware(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The tracking middleware is installed, and after the authentication middleware."""
    chain = list(settings.MIDDLEWARE)
    ours = _position(chain, ACTIVITY_MIDDLEWARE)
    if ours is None:
        return [
            checks.Error(
                f"'{ACTIVITY_MIDDLEWARE}' is not in MIDDLEWARE: no page view or visit is recorded.",
                hint=f"Add it to MIDDLEWARE after '{AUTH_MIDDLEWARE}'.",
                id="activity.E001",
            )
        ]
    auth = _position(chain, AUTH_MIDDLEWARE)
    if auth is not None and ours < auth:
        return [
            checks.Error(
                f"'{ACTIVITY_MIDDLEWARE}' comes before '{AUTH_MIDDLEWARE}' in MIDDLEWARE.",
                hint="Move it after the authentication middleware: it reads request.user, which that one sets.",
                id="activity.E002",
            )
        ]
    return []


def setting_values(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Every public setting has a value of its type, within its bounds (``activity.conf``)."""
    found = []
    for setting in conf.SETTINGS:
        try:
            conf.get(setting.name)
        except ImproperlyConfigured as error:
            found.append(checks.Error(str(error), hint=f"Default: {setting.default!r}.", id="activity.E006"))
    return found


def redis_url(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """In production (``check --deploy``) ``REDIS_URL`` is set, not left to the development default."""
    if hasattr(settings, "REDIS_URL"):
        return []
    return [
        checks.Error(
            f"REDIS_URL is not set: the activity state goes to the development default {DEFAULT_REDIS_URL}.",
            hint="Set REDIS_URL in the settings (from the environment) to the Redis that holds the activity state.",
            id="activity.E003",
        )
    ]


def redis_server(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Redis answers at ``REDIS_URL`` (``activity.W003``), and keeps what has no TTL: no ``allkeys-*``
    eviction, AOF or RDB on. One round trip, CONFIG GET, answers both.

    A deploy check (``check --deploy``, README's adopt step 5), as every check reading Redis is: the
    other checks run before every management command, and a ``createsuperuser`` has no business
    with Redis. Redis not answering is a warning, not an error: the site still starts, its pages
    served (tracking fails open), and the API answers 503 until Redis answers."""
    from activity.errors import StoreUnavailable
    from activity.services.health import redis_config

    if not hasattr(settings, "REDIS_URL"):
        return []  # activity.E003 says so; the development default is not the Redis to judge
    try:
        config = redis_config()
    except ImproperlyConfigured:
        return []  # a setting Redis needs is wrong: activity.E006 says which
    except StoreUnavailable as error:
        return [
            checks.Warning(
                f"Nothing answers at REDIS_URL ({conf.redacted(conf.get('REDIS_URL'))}): {error}. Until it does the "
                "activity API answers 503 and tracking pauses.",
                hint="Start Redis there (make run starts one of its own when nothing answers), or set "
                "REDIS_URL to the Redis that holds the activity state.",
                id="activity.W003",
            )
        ]
    where = f"The Redis at REDIS_URL ({conf.redacted(conf.get('REDIS_URL'))})"
    found: list[checks.CheckMessage] = []
    policy = config.get("maxmemory-policy")
    if policy is not None and policy.startswith("allkeys-"):
        found.append(
            checks.Error(
                f"{where} has maxmemory-policy {policy}: at maxmemory it evicts keys that have no TTL, "
                "the first-visit hashes, the last-seen sets and the flush queue, silently: visitors "
                "counted new again, last seen never written to the database.",
                hint="Set maxmemory-policy noeviction (redis.conf, or CONFIG SET then CONFIG REWRITE): a full "
                "Redis then refuses writes, which the service counts and answers 503 for, never acknowledging "
                "them as kept. A cache that needs allkeys-* eviction belongs on a Redis of its own.",
                id="activity.E007",
            )
        )
    if config.get("appendonly") == "no" and config.get("save") == "":
        found.append(
            checks.Warning(
                f'{where} keeps nothing on disk (appendonly no, save ""): a restart of it erases the '
                "first-visit store, this month's active users, sessions, and every last-seen change "
                "the flush has not written yet.",
                hint="Turn on the AOF: appendonly yes and appendfsync everysec in redis.conf (or CONFIG SET "
                "appendonly yes, then CONFIG REWRITE), and keep RDB snapshots beside it; make run's own Redis "
                "does so in var/redis/. For a development Redis whose data may go, add 'activity.W004' to "
                "SILENCED_SYSTEM_CHECKS. docs/loss-budget.md has what each setup can lose.",
                id="activity.W004",
            )
        )
    if not {"maxmemory-policy", "appendonly", "save"} <= config.keys():
        found.append(
            checks.Info(
                f"{where} refuses CONFIG GET (renamed or disabled, as managed Redis often does, or an ACL): "
                "its eviction policy and persistence could not be checked (activity.E007, activity.W004).",
                hint="Check them in the provider's settings: maxmemory-policy noeviction, and "
                "AOF or RDB persistence on. Then silence this with SILENCED_SYSTEM_CHECKS = ['activity.I001'].",
                id="activity.I001",
            )
        )
    return found


LOOPBACK = {"localhost", "127.0.0.1", "::1"}


def redis_database(url: str, service: str | None = None) -> tuple[str, int] | None:
    """(server address, database number) of a Redis URL, as redis-py or kombu spell it; None for a
    URL of another transport. Behind Redis Sentinel the server is the service's primary, named in
    the store's ``redis+sentinel://`` URL, or by ``service`` (kombu's ``master_name`` transport
    option) for one of kombu's ``sentinel://`` URLs."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if parts.scheme == conf.SENTINEL_SCHEME:
        try:
            found = conf.parse_sentinel_url(url)
        except ValueError:
            return None  # activity.E006 says what is wrong with it
        return (f"the primary of Sentinel service {found.service}", found.db) if found else None
    if parts.scheme == "sentinel":
        if not service:
            return None
        address, number = f"the primary of Sentinel service {service}", parts.path.strip("/") or "0"
    elif parts.scheme in {"redis", "rediss"}:
        host = parts.hostname or "localhost"
        address = f"{'localhost' if host in LOOPBACK else host}:{parts.port or 6379}"
        number = parts.path.strip("/") or query.get("db", ["0"])[0]
    elif parts.scheme in {"unix", "redis+socket", "socket"}:
        address = parts.path
        number = (query.get("db") or query.get("virtual_host") or ["0"])[0]
    else:
        return None
    try:
        return address, int(number)
    except ValueError:
        return None


def _broker_urls() -> Iterable[str]:
    """The Celery broker URLs in use: the Celery app's, and the settings' (the app may not be loaded
    in this process); a failover list (``a;b`` or a list) gives each."""
    for value in (current_app.conf.broker_url, getattr(settings, "CELERY_BROKER_URL", None)):
        for url in [value] if isinstance(value, str) else value or []:
            yield from filter(None, (part.strip() for part in url.split(";")))


def _broker_service() -> str | None:
    """The Sentinel service of kombu's ``sentinel://`` broker URLs (their ``master_name`` option)."""
    for options in (
        current_app.conf.broker_transport_options,
        getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None),
    ):
        if options and options.get("master_name"):
            return str(options["master_name"])
    return None


def broker_database(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Celery's broker is not the store's Redis database (reads only settings: no Redis command)."""

    try:
        store = redis_database(conf.get("REDIS_URL"))
    except ImproperlyConfigured:
        return []
    service = _broker_service()
    shared = sorted({url for url in _broker_urls() if store is not None and redis_database(url, service) == store})
    return [
        checks.Warning(
            f"Celery's broker ({conf.redacted(url)}) is the activity store's Redis database (db {store[1]} of "
            f"{store[0]}): whatever empties the one empties the other. A FLUSHDB to drop a stuck task backlog "
            "erases the first-visit store, this month's active users and the last-seen changes the flush has "
            "not written yet.",
            hint="Give the broker a database of its own (CELERY_BROKER_URL = 'redis://host:6379/1' beside "
            "REDIS_URL's /0): FLUSHDB then stays inside one. Better, a Redis of its own: databases of one server "
            "still share its memory, eviction and FLUSHALL, and Matomo's QueuedTracking lost 30-40% of its "
            "events with its queue and a cache in two databases of one server (plugin-QueuedTracking #167).",
            id="activity.W005",
        )
        for url in shared
    ]


def beat_schedule(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """The Celery app's beat schedule runs the flush (else nothing reaches the database)."""
    schedule = current_app.conf.beat_schedule or {}
    if any(entry.get("task") == FLUSH_TASK for entry in schedule.values()):
        return []
    return [
        checks.Warning(
            f"The beat schedule of the Celery app '{current_app.main}' has no entry running '{FLUSH_TASK}': "
            "unless the flush runs another way (manage.py activity_flush from cron), last seen never "
            "reaches the database and the flush backlog only grows.",
            hint=(
                "In your Celery module add app.on_after_configure.connect(install_beat_schedule) "
                "(from activity.schedule), and import that module in your project package's __init__.py "
                "as Celery's Django guide does. If the flush runs from a schedule this process cannot see, "
                "silence this check."
            ),
            id="activity.W002",
        )
    ]


def key_prefix(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Every key has a prefix: the sweep SCANs and repairs everything under it."""
    if conf.settings.KEY_PREFIX:
        return []
    return [
        checks.Error(
            "ACTIVITY_KEY_PREFIX is empty: the service's keys mix with everything else in the Redis database, "
            "and the sweep would give a TTL to, or delete, keys that are not its own.",
            hint="Set ACTIVITY_KEY_PREFIX to a short string of its own such as 'act:' (the default).",
            id="activity.E004",
        )
    ]


def register() -> None:
    """Register every check (called by ``ActivityConfig.ready``; registering twice is harmless). The
    ones that read Redis, and the one about production's settings, run under ``check --deploy`` only."""
    for check in (setting_values, middleware, beat_schedule, key_prefix, broker_database):
        checks.register(check, TAG)
    for check in (redis_url, redis_server):
        checks.register(check, TAG, deploy=True)
