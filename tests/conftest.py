"""Shared fixtures: the store's real Redis client, per-test key clean-up, users and API clients."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import redis
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import override_settings

from activity import clock, conf, permissions
from activity.errors import StoreUnavailable
from activity.services import funnels, ingest, rate_limits, tracking
from activity.services.tracking import fail_open
from activity.store.client import get_client
from activity.web.api.authentication import standings, tokens
from project.redis_server import PrivateRedis
from tests.clients import APIClient, Client


def delete_own_keys(client) -> None:
    """Delete keys under this run's prefix only; never anything else on the server."""
    batch = list(client.scan_iter(match=f"{conf.settings.KEY_PREFIX}*", count=1000))
    for start in range(0, len(batch), 500):
        client.delete(*batch[start : start + 500])


@pytest.fixture
def redis_client():
    client = get_client()
    delete_own_keys(client)
    yield client
    delete_own_keys(client)


def _forget_process_state() -> None:
    fail_open.reset()
    ingest.PROCESS_DAY_WRITES.clear()
    funnels.forget()
    rate_limits.forget()
    tokens.clear()
    standings.clear()


@pytest.fixture
def client() -> Client:
    """pytest-django's ``client``, as a browser (``tests.clients``)."""
    return Client()


@pytest.fixture
def admin_client(db, admin_user) -> Client:
    """pytest-django's ``admin_client``, as a browser (``tests.clients``)."""
    browser = Client()
    browser.force_login(admin_user)
    return browser


def local_midnight(zone: str, day: date) -> float:
    """Epoch seconds of ``day``'s local (wall-clock) midnight in ``zone``, worked out apart from the
    service's calendar so tests can check it."""
    return datetime(day.year, day.month, day.day, tzinfo=ZoneInfo(zone)).timestamp()


@pytest.fixture
def at(monkeypatch) -> Callable[[float], None]:
    """Set the service clock: ``at(ts)``."""

    def set_now(ts: float) -> None:
        monkeypatch.setattr(clock, "now", lambda: ts)

    return set_now


@pytest.fixture
def mid_minute(monkeypatch) -> float:
    """Stop the clock halfway through a minute, so a test counting requests in a fixed rate-limit
    window never sees the window end between two requests (which would start a new count)."""
    moment = clock.now()
    moment = moment - moment % 60 + 30
    monkeypatch.setattr(clock, "now", lambda: moment)
    return moment


class RequestByRequest:
    """The suite's tracking backend in place of the process's batches: a request sends its activity
    and throttle counts before answering, so a test reads what its requests wrote. A send Redis
    refuses pauses tracking, as a refused batch does. The batches (production's backend) have their
    own tests (test_track_batches, test_request_path's ``batched``)."""

    def add(self, entry: tracking.Entry) -> None:
        try:
            tracking.send([entry])
        except StoreUnavailable as error:
            fail_open.failed(error)

    def flush(self) -> None:
        """Nothing ever waits."""

    def waiting(self) -> int:
        return 0


@pytest.fixture(autouse=True)
def _tracked_request_by_request(monkeypatch):
    monkeypatch.setattr(tracking, "batches", RequestByRequest())


@pytest.fixture(autouse=True)
def _clean_state(request, monkeypatch, redis_client):
    if not {"db", "transactional_db"} & set(request.fixturenames) and not request.node.get_closest_marker("django_db"):
        monkeypatch.setattr(funnels, "read_definitions", list)  # no database, so no funnel defined
    _forget_process_state()
    yield
    _forget_process_state()


class StallingRedis:
    """A throwaway redis-server that the service is pointed at and a test can stall."""

    def __init__(self, url: str) -> None:
        self.url = url

    @contextmanager
    def stalled(self, seconds: float) -> Iterator[None]:
        """DEBUG SLEEP from a second connection, under way when the block starts: the server answers
        nobody for ``seconds``, then runs what it received meanwhile, the requests of a client that
        gave up on their reply included. The block's exit waits for the server to wake."""
        sleeper = threading.Thread(
            target=lambda: redis.Redis.from_url(self.url).execute_command("DEBUG", "SLEEP", seconds)
        )
        sleeper.start()
        time.sleep(0.1)  # the DEBUG SLEEP reaches the server before the block's first request
        try:
            yield
        finally:
            sleeper.join()


@pytest.fixture(scope="session")
def _debug_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis(args=["--enable-debug-command", "yes"]).start()  # the run's own server refuses DEBUG
    yield server
    server.stop()


@pytest.fixture
def stalling_redis(_debug_redis) -> Iterator[StallingRedis]:
    """The service pointed at a standalone server of the run's own, emptied first, that the test can stall."""
    redis.Redis.from_url(_debug_redis.url).flushall()  # all of it is these tests' own data
    with override_settings(REDIS_URL=_debug_redis.url, ACTIVITY_REDIS_CLUSTER=False):
        yield StallingRedis(_debug_redis.url)


APP_PERMISSIONS = (
    permissions.VIEW_ACTIVITY,
    permissions.EXPORT_ACTIVITY,
    permissions.ERASE_ACTIVITY,
    permissions.INGEST_EVENTS,
    permissions.RUN_JOBS,
    permissions.DEFINE_FUNNELS,
)


def with_permissions(user, *names: str):
    """``user`` granted the app's permissions ``names`` (dotted, as ``activity.permissions`` names
    them; all of them when none are given), read afresh so no permission cache hides them."""
    codenames = [name.split(".", 1)[1] for name in names or APP_PERMISSIONS]
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="activity", codename__in=codenames))
    return type(user).objects.get(pk=user.pk)


@pytest.fixture
def staff(db):
    """A staff user granted every permission of the app (``is_staff`` alone grants none)."""
    return with_permissions(get_user_model().objects.create_user("staff", is_staff=True))


@pytest.fixture
def member(db):
    return get_user_model().objects.create_user("member")


@pytest.fixture
def staff_api(staff) -> APIClient:
    api = APIClient()
    api.force_authenticate(staff)
    return api


@pytest.fixture
def member_api(member) -> APIClient:
    api = APIClient()
    api.force_authenticate(member)
    return api


ARTIFACTS = Path(__file__).resolve().parent / "artifacts"  # the browser tests' screenshots
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As Debian's chromium needs them here: no sandbox as root, and no background calls to Google.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """Debian's chromium driven by Playwright. Without it the test is skipped with the install command,
    unless ``ACTIVITY_REQUIRE_BROWSER`` is set (``.ci/run`` sets it after installing chromium): then it
    fails."""
    if not Path(CHROMIUM).exists():
        message = "Debian's chromium is not installed (apt-get install chromium)"
        if os.environ.get("ACTIVITY_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are plain
    # blocking calls all the same, so Django's async-safety guard is told so.
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()
