"""The app's system checks: each fires on the wrong setup it names (and only then), with its id and a
hint, and ``manage.py check --deploy`` is clean on the example project with production settings.

The checks run against a Redis set up as the loss budget asks (AOF on: ``persistent``), not the
run's throwaway server, which keeps nothing on disk and so gets ``activity.W004``, truly; the Redis
checks each start a real server in the state they are about."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery import current_app
from django.conf import settings
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from activity.checks import redis_database
from activity.schedule import beat_schedule
from activity.web.middleware import ActivityMiddleware
from project.redis_server import PrivateCluster, PrivateRedis, free_port
from tests.conftest import delete_own_keys

ROOT = Path(__file__).resolve().parent.parent
AUTH = "django.contrib.auth.middleware.AuthenticationMiddleware"
OURS = "activity.web.middleware.ActivityMiddleware"
SESSIONS = "django.contrib.sessions.middleware.SessionMiddleware"


class SiteTracking(ActivityMiddleware):
    """A site's own subclass of the middleware counts as the middleware."""


@pytest.fixture(scope="module")
def persistent() -> Iterator[PrivateRedis]:
    """A Redis as production should run one for the service: AOF on, no allkeys-* eviction."""
    with PrivateRedis(args=["--appendonly", "yes"]) as server:
        yield server


def on(server: PrivateRedis | PrivateCluster, cluster: bool = False) -> override_settings:
    """Settings pointing the store at ``server`` (a standalone one on a cluster run too)."""
    return override_settings(REDIS_URL=server.url, ACTIVITY_REDIS_CLUSTER=cluster)


@pytest.fixture(autouse=True)
def _store_on_a_persistent_redis(persistent):
    with on(persistent):
        yield
        with redis.Redis.from_url(persistent.url) as raw:
            delete_own_keys(raw)


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
        ("ACTIVITY_SESSION_WINDOW", "1.5", "invalid literal"),
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
        assert set(found(deploy=True)) == {"activity.E003"}  # no Redis read: the default is not the one to judge
        assert "activity.E003" not in found(deploy=False)  # development uses the default


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


def manage_check(*options: str, env: dict[str, str], without: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``manage.py check`` with ``options`` on the example project, in the environment given (nothing
    of the production variables leaks in from the test's own)."""
    dropped = {*PRODUCTION, "SECRET_KEY", *without}
    environment = {k: v for k, v in os.environ.items() if k not in dropped}
    environment.update(DJANGO_SETTINGS_MODULE="project.settings", **env)
    return subprocess.run(
        [sys.executable, "manage.py", "check", *options],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def check_deploy(env: dict[str, str], without: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``manage.py check --deploy``, failing on warnings too."""
    return manage_check("--deploy", "--fail-level", "WARNING", env=env, without=without)


def test_check_deploy_is_clean_on_the_example_project_with_production_settings(persistent):
    production = {**PRODUCTION, "SECRET_KEY": secrets.token_urlsafe(50), "ACTIVITY_REDIS_CLUSTER": "0"}
    # A Redis set up for production (the run's own keeps nothing on disk: activity.W004).
    clean = check_deploy({**production, "REDIS_URL": persistent.url})
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


def test_plain_check_sends_nothing_to_redis_and_check_deploy_reports_it():
    """The checks that read Redis are deploy checks. ``manage.py check`` runs the checks every command
    runs first (``migrate``, ``createsuperuser``): it passes, warnings failing it too, and opens no
    connection to a REDIS_URL that would take one; with that port closed, ``check --deploy`` says
    nothing answers there."""
    with socket.create_server(("127.0.0.1", 0)) as listener:  # takes connections, answers nothing
        url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
        plain = manage_check("--fail-level", "WARNING", env={"REDIS_URL": url})
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # a connection the check opened would be waiting here, closed or not
    assert plain.returncode == 0, plain.stderr
    assert "no issues" in plain.stdout
    deploy = manage_check("--deploy", "--tag", "activity", env={"REDIS_URL": url})
    assert deploy.returncode == 0, deploy.stderr  # a warning: the site still starts
    assert "activity.W003" in deploy.stderr and url in deploy.stderr


def test_redis_not_answering_is_said_plainly_without_the_password():
    assert "activity.W003" not in found(deploy=True)
    port = free_port()
    with override_settings(REDIS_URL=f"redis://:s3cret@127.0.0.1:{port}/0"):
        message = found(deploy=True)["activity.W003"]
        assert set(found(deploy=True)) == {"activity.W003"}  # the checks that read Redis say nothing more
    assert message.level == checks.WARNING  # the site still starts
    assert f"redis://:***@127.0.0.1:{port}/0" in message.msg and "s3cret" not in message.msg
    assert "503" in message.msg


def test_a_setting_redis_needs_being_wrong_is_reported_once():
    with override_settings(ACTIVITY_REDIS_TIMEOUT="soon"):
        assert set(found(deploy=True)) == {"activity.E006"}


def test_an_eviction_policy_that_evicts_keys_without_a_ttl_is_an_error():
    # Only the policy is wrong: the AOF is on.
    with PrivateRedis(args=["--maxmemory-policy", "allkeys-lru", "--appendonly", "yes"]) as server, on(server):
        message = found(deploy=True)["activity.E007"]
        assert set(found(deploy=True)) == {"activity.E007"} and message.level == checks.ERROR
        assert "allkeys-lru" in message.msg and "first-visit" in message.msg and "noeviction" in message.hint
        with redis.Redis.from_url(server.url) as raw:
            for policy in ("allkeys-lfu", "allkeys-random"):
                raw.config_set("maxmemory-policy", policy)
                assert policy in found(deploy=True)["activity.E007"].msg
            for policy in ("noeviction", "volatile-lru", "volatile-ttl"):  # only keys with a TTL, or none
                raw.config_set("maxmemory-policy", policy)
                assert found(deploy=True) == {}


def test_a_redis_that_keeps_nothing_on_disk_is_warned(persistent):
    with PrivateRedis() as server, on(server):  # the throwaway kind: --save "" --appendonly no
        message = found(deploy=True)["activity.W004"]
        assert set(found(deploy=True)) == {"activity.W004"} and message.level == checks.WARNING
        assert server.url in message.msg and "appendonly yes" in message.hint and "SILENCED" in message.hint
        with redis.Redis.from_url(server.url) as raw:
            raw.config_set("save", "3600 1")  # RDB alone will do
            assert found(deploy=True) == {}
    with redis.Redis.from_url(persistent.url) as raw:
        assert raw.config_get("save") == {"save": ""}  # and the AOF alone (the autouse server)
    assert found(deploy=True) == {}


def test_the_redis_checks_can_be_silenced_the_django_way():
    with PrivateRedis(args=["--maxmemory-policy", "allkeys-random"]) as server, on(server):
        with pytest.raises(SystemCheckError, match=r"activity\.E007"):
            call_command("check", "--deploy", "--tag", "activity")
        with override_settings(SILENCED_SYSTEM_CHECKS=["activity.E007"]):
            call_command("check", "--deploy", "--tag", "activity")
            with pytest.raises(SystemCheckError, match=r"activity\.W004"):
                call_command("check", "--deploy", "--tag", "activity", "--fail-level", "WARNING")
        with override_settings(SILENCED_SYSTEM_CHECKS=["activity.E007", "activity.W004"]):
            call_command("check", "--deploy", "--tag", "activity", "--fail-level", "WARNING")


def test_config_refused_is_an_info_never_a_crash(persistent):
    with PrivateRedis(args=["--rename-command", "CONFIG", ""]) as server, on(server):  # managed Redis's way
        message = found(deploy=True)["activity.I001"]
        assert set(found(deploy=True)) == {"activity.I001"} and message.level == checks.INFO
        assert "activity.E007" in message.msg and "noeviction" in message.hint
    with redis.Redis.from_url(persistent.url) as raw:  # an ACL without CONFIG
        raw.acl_setuser(
            "no-config", enabled=True, passwords=["+pw"], keys="*", channels="*", commands=["+@all", "-config"]
        )
    with override_settings(REDIS_URL=persistent.url.replace("//", "//no-config:pw@")):
        assert set(found(deploy=True)) == {"activity.I001"}


def test_the_redis_checks_read_one_node_of_a_cluster():
    cluster = PrivateCluster()
    for node in cluster.nodes:
        node.args += ["--maxmemory-policy", "allkeys-lru"]
    with cluster, on(cluster, cluster=True):
        assert set(found(deploy=True)) == {"activity.E007", "activity.W004"}


@pytest.mark.parametrize(
    ("broker", "shared"),
    [
        ("{store}", True),
        ("redis://localhost:{port}", True),  # the same server spelt otherwise, database 0 by default
        ("redis://127.0.0.1:{port}/0?ssl=false", True),
        ("amqp://guest@127.0.0.1//;{store}", True),  # a failover list
        ("redis://127.0.0.1:{port}/1", False),  # a database of its own
        ("redis://127.0.0.1:{port}?db=1", False),
        ("redis://127.0.0.1:1/0", False),  # another server
        ("amqp://guest@127.0.0.1:{port}//", False),
    ],
)
def test_a_broker_sharing_the_store_database_is_warned(persistent, monkeypatch, broker, shared):
    url = broker.format(store=persistent.url, port=persistent.port)
    monkeypatch.setitem(current_app.conf, "broker_url", url)
    with override_settings(CELERY_BROKER_URL=url):
        messages = found()
    assert set(messages) == ({"activity.W005"} if shared else set())
    if shared:
        message = messages["activity.W005"]
        assert f"db 0 of localhost:{persistent.port}" in message.msg and "FLUSHDB" in message.msg
        assert "/1" in message.hint and "Matomo" in message.hint


def test_the_example_project_keeps_its_broker_in_another_database(private_cluster):
    run_redis = os.environ["REDIS_URL"]  # what project/settings.py read, as make run gives it
    store, broker = redis_database(run_redis), redis_database(current_app.conf.broker_url)
    assert store is not None and broker is not None
    if private_cluster is None:  # a cluster run's broker is a server of its own
        assert store[0] == broker[0] and store[1] != broker[1]
    with override_settings(REDIS_URL=run_redis):
        assert "activity.W005" not in found()


def test_a_sentinel_url_that_is_not_whole_is_an_error_saying_what_is_wrong_without_the_password():
    with override_settings(REDIS_URL="redis+sentinel://:s3cret@127.0.0.1:26379,127.0.0.1:26380/"):
        messages = found()
    assert set(messages) == {"activity.E006"}
    message = messages["activity.E006"].msg
    assert "REDIS_URL" in message and "names no service" in message and "redis+sentinel://[[user]:password@]" in message
    assert "s3cret" not in message and ":***@127.0.0.1:26379" in message


def test_a_sentinel_url_cannot_be_a_cluster():
    with override_settings(REDIS_URL="redis+sentinel://127.0.0.1:26379/svc/0", ACTIVITY_REDIS_CLUSTER=True):
        messages = found()
    assert set(messages) == {"activity.E006"}
    assert "not a cluster" in messages["activity.E006"].msg


def test_sentinels_not_answering_are_said_plainly_without_the_password():
    url = f"redis+sentinel://:s3cret@127.0.0.1:{free_port()},127.0.0.1:{free_port()}/svc/0"
    with override_settings(REDIS_URL=url, ACTIVITY_REDIS_CLUSTER=False):  # off on the cluster pass too
        message = found(deploy=True)["activity.W003"]
    assert "No master found for 'svc'" in message.msg and "s3cret" not in message.msg


@pytest.mark.parametrize(
    ("broker", "master_name", "shared"),
    [
        ("sentinel://127.0.0.1:{a}/0;sentinel://127.0.0.1:{b}/0", "svc", True),  # kombu's form
        ("redis+sentinel://127.0.0.1:{b}/svc", None, True),  # the store's form, database 0 by default
        ("sentinel://127.0.0.1:{a}/1", "svc", False),  # a database of its own
        ("sentinel://127.0.0.1:{a}/0", "other", False),  # another service
        ("sentinel://127.0.0.1:{a}/0", None, False),  # kombu would refuse it: no master_name
        ("redis://127.0.0.1:{a}/0", None, False),
    ],
)
def test_a_broker_sharing_a_sentinel_stores_database_is_warned(monkeypatch, broker, master_name, shared):
    a, b = free_port(), free_port()  # nothing answers there: only the URLs are compared
    url = broker.format(a=a, b=b)
    options = {"master_name": master_name} if master_name else {}
    monkeypatch.setitem(current_app.conf, "broker_url", url)
    monkeypatch.setitem(current_app.conf, "broker_transport_options", options)
    store = f"redis+sentinel://127.0.0.1:{a},127.0.0.1:{b}/svc/0"
    with override_settings(
        REDIS_URL=store, ACTIVITY_REDIS_CLUSTER=False, CELERY_BROKER_URL=url, CELERY_BROKER_TRANSPORT_OPTIONS=options
    ):
        messages = found()
    assert ("activity.W005" in messages) == shared
    if shared:
        assert "db 0 of the primary of Sentinel service svc" in messages["activity.W005"].msg
