"""The app's system checks: each fires on the wrong setup it names (and only then), with its id and a
hint, and ``manage.py check --deploy`` is clean on the example project with production settings."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from celery import current_app
from django.conf import settings
from django.core import checks
from django.test import override_settings

from activity import clock
from activity.events import Event
from activity.schedule import beat_schedule
from activity.services import ingest, last_seen
from activity.web.middleware import ActivityMiddleware
from project.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent
AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"
OURS = "activity.web.middleware.ActivityMiddleware"
SESSIONS = "django.contrib.sessions.middleware.SessionMiddleware"


class SiteTracking(ActivityMiddleware):
    """A site's own subclass of the middleware counts as the middleware."""


def found(deploy: bool = False) -> dict[str, checks.CheckMessage]:
    """The app's check messages by id, run through Django's registry (so registration is tested too)."""
    messages = checks.run_checks(tags=["activity"], include_deployment_checks=deploy)
    assert all(message.hint for message in messages), messages
    return {message.id: message for message in messages}


def test_the_example_project_passes_every_check():
    assert found() == {}
    assert found(deploy=True) == {}


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("ACTIVITY_ONLINE_WINDOW", "soon", "invalid literal"),
        ("ACTIVITY_SESSION_MAX_PAGES", 0, "at least 1"),
        ("ACTIVITY_REDIS_TIMEOUT", "-1", "at least 0.001"),
        ("ACTIVITY_LAST_SEEN_PARTITIONS", "1.5", "invalid literal"),
        ("ACTIVITY_THROTTLE_RATES", {"anon": "many"}, "not a rate such as '120/min'"),
        ("ACTIVITY_THROTTLE_RATES", '{"anon": "1/min",}', "Expecting property name"),
    ],
)
def test_a_setting_of_the_wrong_type_or_below_its_minimum_is_an_error_naming_it(name, value, reason):
    with override_settings(**{name: value}):
        messages = found()
    assert set(messages) == {"activity.E006"}
    assert name in messages["activity.E006"].msg and reason in messages["activity.E006"].msg


def test_every_public_setting_is_read_from_the_environment_by_the_example_project():
    environment = {
        **os.environ,
        "ACTIVITY_ONLINE_WINDOW": "77",
        "ACTIVITY_TRUSTED_PROXIES": "10.0.0.0/8, 10.1.2.3",
        "ACTIVITY_THROTTLE_RATES": '{"ingest": "50/s", "user": null}',  # JSON; the scopes not given keep theirs
    }
    script = (
        "from activity import conf; "
        "print(conf.settings.ONLINE_WINDOW, conf.settings.TRUSTED_PROXIES, conf.settings.THROTTLE_RATES)"
    )
    found_values = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {script}"],
        env=environment,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert found_values == "77 ('10.0.0.0/8', '10.1.2.3') {'user': None, 'anon': '120/min', 'ingest': '50/s'}"


@pytest.mark.parametrize(
    ("middleware", "expected"),
    [
        ([SESSIONS, AUTH], "activity.E001"),
        ([SESSIONS, OURS, AUTH], "activity.E002"),
        ([SESSIONS, "tests.test_checks.SiteTracking", AUTH], "activity.E002"),
        ([SESSIONS, AUTH, "tests.test_checks.SiteTracking"], None),
        ([SESSIONS, AUTH, OURS], None),
    ],
)
def test_the_middleware_must_be_there_and_after_authentication(middleware, expected):
    with override_settings(MIDDLEWARE=middleware):
        ids = set(found())
    assert ids == ({expected} if expected else set())


def test_redis_url_unset_fails_the_deploy_check_only():
    with override_settings():
        del settings.REDIS_URL
        assert "activity.E003" in found(deploy=True)
        assert "activity.E003" not in found(deploy=False)  # development uses the default


def test_partition_setting_and_redis_layout_must_agree(redis_client):
    assert "activity.E005" not in found(deploy=True)  # nothing stored: nothing to disagree with
    ingest.record_events([Event("u1", clock.now())])  # unpartitioned last seen (the setting is 1)
    assert "activity.E005" not in found(deploy=True)
    with override_settings(ACTIVITY_LAST_SEEN_PARTITIONS=4):
        assert "unpartitioned last seen remains" in found(deploy=True)["activity.E005"].msg
        last_seen.migrate()
        assert "activity.E005" not in found(deploy=True)
        assert "activity.E005" not in found(deploy=False)  # reads Redis: a deploy check only
    assert "is partitioned in Redis" in found(deploy=True)["activity.E005"].msg
    with override_settings(ACTIVITY_LAST_SEEN_PARTITIONS=2):
        assert "partitions past the setting's 2" in found(deploy=True)["activity.E005"].msg


def test_a_beat_schedule_without_the_flush_is_warned(monkeypatch):
    schedule = beat_schedule()
    assert "activity.W002" not in found()
    monkeypatch.setitem(current_app.conf, "beat_schedule", {k: v for k, v in schedule.items() if k != "activity-flush"})
    message = found()["activity.W002"]
    assert "install_beat_schedule" in message.hint and message.level == checks.WARNING
    # Any entry name will do, as long as one runs the flush.
    monkeypatch.setitem(current_app.conf, "beat_schedule", {"my-flush": {"task": "activity.flush", "schedule": 5.0}})
    assert "activity.W002" not in found()


def test_an_empty_key_prefix_is_an_error():
    with override_settings(ACTIVITY_KEY_PREFIX=""):
        assert set(found()) == {"activity.E004"}


PRODUCTION = {
    "DEBUG": "0",
    "ALLOWED_HOSTS": "activity.example.com",
    "SECURE_SSL_REDIRECT": "1",
    "SESSION_COOKIE_SECURE": "1",
    "CSRF_COOKIE_SECURE": "1",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "SECURE_HSTS_PRELOAD": "1",
}


def check_deploy(env: dict[str, str], without: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``manage.py check --deploy`` on the example project, in the environment given (nothing of the
    production variables leaks in from the test's own), failing on warnings too."""
    dropped = {*PRODUCTION, "SECRET_KEY", *without}
    environment = {k: v for k, v in os.environ.items() if k not in dropped}
    environment.update(DJANGO_SETTINGS_MODULE="project.settings", **env)
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_on_the_example_project_with_production_settings():
    production = {**PRODUCTION, "SECRET_KEY": secrets.token_urlsafe(50)}
    clean = check_deploy(production)
    assert clean.returncode == 0, clean.stderr
    assert "no issues" in clean.stdout
    # The same without REDIS_URL: the app's own deploy check says so.
    unset = check_deploy(production, without=("REDIS_URL",))
    assert unset.returncode == 1
    assert "activity.E003" in unset.stderr
    # The development defaults are what Django's deploy checks are there to catch.
    development = check_deploy({})
    assert development.returncode == 1
    assert "security.W004" in development.stderr and "security.W009" in development.stderr


def test_redis_not_answering_is_said_plainly_without_the_password():
    assert "activity.W003" not in found()
    port = free_port()
    with override_settings(REDIS_URL=f"redis://:s3cret@127.0.0.1:{port}/0"):
        message = found()["activity.W003"]
    assert message.level == checks.WARNING  # migrate and runserver still run
    assert f"redis://:***@127.0.0.1:{port}/0" in message.msg and "s3cret" not in message.msg
    assert "503" in message.msg


def test_a_setting_redis_needs_being_wrong_is_reported_once():
    with override_settings(ACTIVITY_REDIS_TIMEOUT="soon"):
        assert set(found()) == {"activity.E006"}
