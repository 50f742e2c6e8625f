"""System checks (tag ``activity``): a wrong setup is reported by ``manage.py check``, ``runserver``
and ``migrate`` rather than found later as missing data. Checks run before every management command,
so they cost little: none reads the database, and Redis gets one PING (``activity.W003``) and, under
``check --deploy`` only, one read (the partition check)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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
DEFAULT_REDIS_URL = conf.BY_NAME["REDIS_URL"].default


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


def redis_answers(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Redis answers at ``REDIS_URL``: said plainly at ``migrate`` or ``runserver`` rather than as a
    503 later. A warning, not an error: the site still starts, its pages served (tracking fails
    open), and the API answers 503 until Redis answers."""
    from activity.errors import StoreUnavailable
    from activity.services.health import ping_store

    try:
        ping_store()
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
    return []


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


def partitions(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``ACTIVITY_LAST_SEEN_PARTITIONS`` matches the last-seen layout in Redis (deploy only: it reads
    Redis; Redis not answering is ``/healthz``'s to report, not this check's)."""
    from activity.errors import StoreUnavailable
    from activity.services import last_seen as layout

    if not hasattr(settings, "REDIS_URL"):
        return []  # activity.E003 says so; the development default is not the data to compare
    try:
        problems = layout.layout_problems()
    except StoreUnavailable:
        return []
    return [
        checks.Error(
            f"ACTIVITY_LAST_SEEN_PARTITIONS and the data in Redis disagree: {problem}.",
            hint="Set ACTIVITY_LAST_SEEN_PARTITIONS to the layout Redis holds, or move the data with "
            "manage.py activity_partition_last_seen (docs/redis-cluster.md).",
            id="activity.E005",
        )
        for problem in problems
    ]


def register() -> None:
    """Register every check (called by ``ActivityConfig.ready``; registering twice is harmless)."""
    for check in (setting_values, middleware, beat_schedule, key_prefix, redis_answers):
        checks.register(check, TAG)
    checks.register(redis_url, TAG, deploy=True)
    checks.register(partitions, TAG, deploy=True)
