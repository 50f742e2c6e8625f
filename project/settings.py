"""Settings read from the environment (12-factor). Each variable has a Django setting of the same name."""

import os
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url

from activity.conf import SENTINEL_SCHEME, SETTINGS, celery_redis

BASE_DIR = Path(__file__).resolve().parent.parent


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


def env_bool(name: str) -> bool:
    return os.environ.get(name, "0").strip().lower() in {"1", "true", "yes", "on"}


SECRET_KEY = os.environ.get("SECRET_KEY", "dev-only-insecure-key-change-me")
DEBUG = os.environ.get("DEBUG", "0") == "1"
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
# HTTPS in production (`manage.py check --deploy` wants them); off by default, as `make run` serves plain HTTP.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT")
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE")
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE")
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS")
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular_sidecar",
    "activity",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's, the Swagger UI's) from STATIC_ROOT, before any other work.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "activity.web.middleware.ActivityMiddleware",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'var' / 'db.sqlite3'}")
DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=60)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not memory, so Celery workers started by the tests see the test database too; one per
    # test process, so two test runs side by side never drop each other's tables.
    DATABASES["default"]["TEST"] = {"NAME": str(BASE_DIR / "var" / f"test-db-{os.getpid()}.sqlite3")}
    DATABASES["default"]["OPTIONS"] = {"timeout": 20}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
# Compressed copies (gzip) made by collectstatic, served by whitenoise; plain names, not the manifest
# storage's hashed ones, so templates render without a collected manifest (tests, a fresh checkout).
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}

# --- Redis and Celery -------------------------------------------------------------------------
# REDIS_URL is set from the environment (with the other settings of the app, below): without it the
# app uses its development default and `manage.py check --deploy` says so (activity.E003). The one
# exception: while `make run` serves with a private redis-server it started (nothing answered at
# REDIS_URL), it keeps that server's URL in this file, which it removes when it stops, so commands
# run in a second terminal without REDIS_URL (createsuperuser, activity_demo) use that server too.
MAKE_RUN_REDIS_URL_FILE = BASE_DIR / "var" / "redis.url"


def _make_run_redis_url() -> str | None:
    try:
        return MAKE_RUN_REDIS_URL_FILE.read_text().strip() or None
    except FileNotFoundError:
        return None


_started_by_make_run = None if "REDIS_URL" in os.environ else _make_run_redis_url()
if _started_by_make_run:
    REDIS_URL = _started_by_make_run
_redis_url = os.environ.get("REDIS_URL") or _started_by_make_run or "redis://127.0.0.1:6379/0"


def _beside(url: str) -> str:
    """Another database of the Redis at ``url``: 1, or 0 when ``url`` names another. Celery's queue
    and results then live apart from the activity state (activity.W005): a FLUSHDB of one database
    leaves the other alone. A Sentinel URL's database is its path's last part (/service/db)."""
    parts = urlsplit(url)
    if parts.scheme == SENTINEL_SCHEME:
        service, _, db = parts.path.strip("/").partition("/")
        return parts._replace(path=f"/{service}/{'1' if db in {'', '0'} else '0'}").geturl()
    if parts.scheme not in {"redis", "rediss"}:
        return url
    return parts._replace(path="/1" if parts.path.strip("/") in {"", "0"} else "/0").geturl()


# A Sentinel URL (redis+sentinel://host:port,host:port/service/db, in REDIS_URL or in these two)
# becomes kombu's sentinel:// form with the service as master_name, so Celery follows the primary too
# (docs/sentinel.md); any other URL is used as it is.
CELERY_BROKER_URL, CELERY_BROKER_TRANSPORT_OPTIONS = celery_redis(
    os.environ.get("CELERY_BROKER_URL", _beside(_redis_url))
)
CELERY_RESULT_BACKEND, CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = celery_redis(
    os.environ.get("CELERY_RESULT_BACKEND", _beside(_redis_url))
)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The worker rides out a broker that fails over or refuses work: an error reply (READONLY after a
# failover, MISCONF, a blocking read cut short with UNBLOCKED) reconnects like a lost connection,
# instead of ending the worker; and it reconnects for as long as the broker is away.
CELERY_BROKER_CHANNEL_ERROR_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_RESULT_EXPIRES = 3600
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "celery")
CELERY_BEAT_SCHEDULE_FILENAME = os.environ.get("CELERY_BEAT_SCHEDULE_FILENAME", str(BASE_DIR / "var" / "beat-schedule"))

HOST = os.environ.get("HOST", "127.0.0.1")
PORT = env_int("PORT", 8000)

# --- The activity service: every public setting from the environment variable of its name
# (activity/conf.py holds them, with their defaults; ACTIVITY_THROTTLE_RATES is JSON there).
for _setting in SETTINGS:
    if _setting.name in os.environ:
        globals()[_setting.name] = os.environ[_setting.name]

# One handler, the root's; the loggers below only set levels and propagate to it. A Celery worker
# replaces the root's handlers with its own (worker_hijack_root_logger), so each line is written
# once there too, in Celery's format: a handler of a logger's own would write it a second time.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "activity": {"level": os.environ.get("LOG_LEVEL", "INFO")},
        # Django's own handlers (a console when DEBUG is on, mail to ADMINS when off) give way to
        # the root's, which would repeat the console's lines.
        "django": {"level": "INFO"},
        # 5xx answers of the site's other pages (the admin), with the traceback of an uncaught
        # exception, and not the 4xx warnings.
        "django.request": {"level": "ERROR"},
    },
}
