"""The app as a site adopts it: build the sdist and the wheel, install the wheel in a fresh virtualenv
beside a brand-new ``django-admin startproject`` site, follow the README's "Adding it to a site"
section word for word, migrate, record a page view through the middleware, read it back through
the API under the prefix the README mounts it at, and run one flush. Then the site as it runs: its
own ``runserver``, and a real Celery worker with beat (``celery -A mysite worker --beat``, as the
README says) that flushes what the site records into the database; and the API's docs page and the
dashboard in chromium, every file they load from the site itself.

The site has a ``REST_FRAMEWORK`` of its own before it adopts the app, one the app must not depend
on (``SITE_REST_FRAMEWORK``: anyone allowed, the browsable renderer first, pages of 2, no
throttles), and a DRF view of its own (``SITE_VIEW``, a plain ``@api_view``); the app's API still
needs its permissions (401 and 403), answers JSON errors and its own page sizes, and throttles at
its own rates, and ``check --deploy`` passes: nothing the README adds judges the site's own views.

The section's Python blocks are appended to the file their first line names and its shell lines are
run as written, in the site's directory, with the fresh virtualenv first on ``PATH``. Besides that
``REST_FRAMEWORK``, the one thing the test adds is where pip finds the package: a constraint
pointing ``django-redis-activity`` at the wheel just built (and Django and redis-py at the versions
this suite runs on, so the second pass, Django 6.0 with redis-py 7.4, installs those).
The site reads ``REDIS_URL``, ``ACTIVITY_KEY_PREFIX`` and ``CELERY_BROKER_URL`` from the environment
as the README's settings do: this run's key prefix, a Redis of the test's own set up as the loss
budget asks (AOF and RDB on, ``make run``'s kind: step 5's ``check --deploy`` fails on a Redis
that keeps nothing on disk, ``activity.W004``, and the test shows that too), and its Celery
queue in the next database of that Redis. Needs PyPI (or a pip cache) for the
dependencies. The browser test skips without chromium, as tests/test_dashboard_browser.py does.
Deselect with ``-m 'not install'``; CI runs it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import django
import pytest
import redis

import activity
from activity.store.last_seen import partition_index
from bench.harness import end
from project.redis_server import PrivateRedis, free_port
from tests.conftest import ARTIFACTS

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "django-redis-activity"
SITE = "mysite"
OWNER, PASSWORD = "owner", "correct horse battery staple"  # the superuser of the running site
# The flush runs every ACTIVITY_FLUSH_INTERVAL (10 s by default) once beat is up: two intervals and
# the worker's start.
FLUSH_WAIT_S = 40


def readme_steps() -> list[tuple[str, str]]:
    """The fenced blocks of the README's "Adding it to a site" section, in order: (language, text)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Adding it to a site\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^( *)```(\w+)\n(.*?)^\1```$", section, flags=re.MULTILINE | re.DOTALL)
    return [(language, textwrap.dedent(text)) for _, language, text in blocks]


def run(command: str | list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    result = subprocess.run(
        command, cwd=cwd, env=env, shell=isinstance(command, str), capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


# What the site's settings say before it adopts the app: none of it may change the app's API.
SITE_REST_FRAMEWORK = """
REST_FRAMEWORK = {
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.BrowsableAPIRenderer",
        "rest_framework.renderers.JSONRenderer",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 2,
    "DEFAULT_THROTTLE_CLASSES": [],
    "DEFAULT_THROTTLE_RATES": {},
}
"""
# ... and a DRF view of its own, with DRF's default schema class.
SITE_VIEW = """
from rest_framework.decorators import api_view
from rest_framework.response import Response


@api_view(["GET"])
def ping(request):
    return Response({"pong": True})
"""
SITE_URL = """
from mysite.views import ping

urlpatterns += [path("ping/", ping)]
"""


@dataclass(frozen=True)
class Site:
    """The adopted site: its directory, the virtualenv it runs in, and that virtualenv's environment."""

    path: Path
    venv: Path
    env: dict[str, str]
    mount: str  # where the README's URLs step includes the app, "/activity/"


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    """The sdist, then the wheel built from it (python -m build's default), as a release makes them."""
    dist = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], ROOT, dict(os.environ))
    return dist


@pytest.fixture(scope="module")
def site_redis(tmp_path_factory) -> Iterator[PrivateRedis]:
    """The site's Redis: persistent, as ``make run``'s is and production's should be."""
    with PrivateRedis(data_dir=tmp_path_factory.mktemp("site-redis")) as server:
        yield server


@pytest.fixture(scope="module")
def site(dist, site_redis, tmp_path_factory) -> Site:
    """A fresh virtualenv and a startproject site that followed the README's steps, shared by the
    module's tests: building and installing is most of their time."""
    (wheel,) = dist.glob("*.whl")
    tmp_path = tmp_path_factory.mktemp("adopter")
    # pip takes the package from the wheel just built and the rest from the index.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path, dict(os.environ))
    constraints = tmp_path / "constraints.txt"
    pins = [f"{DISTRIBUTION} @ {wheel.as_uri()}", f"Django=={django.get_version()}", f"redis=={redis.__version__}"]
    constraints.write_text("\n".join(pins) + "\n")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV", "DATABASE_URL"}
    }
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", PIP_CONSTRAINT=str(constraints))
    env["REDIS_URL"] = site_redis.url
    # The site as it was before: Django, and a project django-admin made.
    run(["pip", "install", "--quiet", "Django"], tmp_path, env)
    path = tmp_path / "site"
    path.mkdir()
    run(["django-admin", "startproject", SITE, str(path)], tmp_path, env)
    with (path / SITE / "settings.py").open("a") as file:
        file.write(SITE_REST_FRAMEWORK)
    (path / SITE / "views.py").write_text(SITE_VIEW)
    with (path / SITE / "urls.py").open("a") as file:
        file.write(SITE_URL)

    steps = readme_steps()
    assert [language for language, _ in steps] == ["sh", "python", "python", "python", "python", "sh"]
    for language, text in steps:
        if language == "python":
            target, body = text.split("\n", 1)
            assert target.startswith(f"# {SITE}/"), target
            with (path / target.removeprefix("# ")).open("a") as file:
                file.write("\n" + body)
        else:
            for line in filter(None, text.splitlines()):
                run(line, path, env)
    (prefix,) = re.findall(r'path\("([^"]*)", include\("activity\.urls"\)\)', (path / SITE / "urls.py").read_text())
    return Site(path, venv, env, f"/{prefix}")


# Run in the site with the fresh virtualenv's Python: a signed-in superuser views a page, then reads
# it back through the API with a token; then the API as others see it, under the site's
# REST_FRAMEWORK, and the paths in and outside the app's prefix: what the test checks is printed as
# JSON.
VISIT = """
import json, os, time
import django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()  # lets the test client's host in
from celery import current_app
from django.contrib.auth import get_user_model
from django.urls import reverse
from rest_framework.authtoken.models import Token
import activity

mount = reverse("activity:healthz").removesuffix("healthz")
API = f"{mount}api/v1/"
user = get_user_model().objects.create_superuser("adopter", "adopter@example.com", "not-used")
browser = Client(HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0")
browser.force_login(user)  # a person's browser: a request without a user agent counts as a bot
page = browser.get("/admin/")
token = Token.objects.create(user=user).key
api = Client(HTTP_AUTHORIZATION=f"Token {token}")
deadline = time.monotonic() + 10  # the middleware's batch goes within tracking.BATCH_MS (50 ms)
while (session := api.get(f"{API}users/{user.pk}/session/")).status_code == 404 and time.monotonic() < deadline:
    time.sleep(0.02)
seen = api.get(f"{API}users/{user.pk}/last-seen/")

def answer(response):
    return [response.status_code, response["Content-Type"], response.content.decode()[:200]]

member = Client()
member.force_login(get_user_model().objects.create_user("member"))
browser_accept = "text/html,application/xhtml+xml,*/*;q=0.8"
refused = {
    "anonymous": answer(Client().get(f"{API}online/", HTTP_ACCEPT=browser_accept)),
    "member": answer(member.get(f"{API}online/", HTTP_ACCEPT=browser_accept)),
    "unknown path": answer(api.get(f"{API}no-such-route/")),
    "unknown path under the prefix": answer(api.get(f"{mount}no-such-page/")),
}
served = {
    "healthz": answer(Client().get(f"{mount}healthz")),
    "metrics": answer(api.get(f"{mount}metrics"))[:2],
    "docs": answer(Client().get(f"{API}docs/"))[:2],
    "outside the prefix": answer(api.get("/no-such-page/"))[:2],
    "the site's own view": answer(Client().get("/ping/", HTTP_ACCEPT="application/json")),
}
views = [{"user": "walker", "path": f"/p{n}"} for n in range(3)]
ingested = api.post(f"{API}events/", {"events": views}, content_type="application/json").status_code
walker = api.get(f"{API}users/walker/session/").json()
document = api.get(f"{API}schema/?format=json").json()

from activity import clock  # a fixed moment mid-minute: the 121 requests share one window
moment = time.time()
moment += 30 - moment % 60
clock.now = lambda: moment
stranger = Client(REMOTE_ADDR="203.0.113.9")
codes = [stranger.get(f"{API}stats/").status_code for _ in range(121)]
throttled = stranger.get(f"{API}stats/")
print(json.dumps({
    "mount": mount,
    "pk": str(user.pk),
    "page": page.status_code,
    "session": [session.status_code, session.json()],
    "last_seen": [seen.status_code, seen.json()],
    "app_from": activity.__file__,
    "tasks": sorted(name for name in current_app.tasks if name.startswith("activity.")),
    "refused": refused,
    "served": served,
    "pages": [ingested, walker["count"], len(walker["results"]), walker["next"]],
    "x-permission": document["paths"][f"{API}stats/"]["get"].get("x-permission"),
    "throttle": [codes.count(401), codes[-1], answer(throttled), throttled.get("Retry-After")],
}))
"""


def test_the_wheel_installs_into_a_new_site_by_the_readme(dist, site):
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    release = f"django_redis_activity-{activity.__version__}"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        packaged = {Path(name).name: archive.read(name) for name in names if name.startswith("activity/lua/")}
        license_file = archive.read(f"{release}.dist-info/licenses/LICENSE")
        metadata = archive.read(f"{release}.dist-info/METADATA").decode()
    assert packaged == {path.name: path.read_bytes() for path in (ROOT / "lua").glob("*.lua")}
    assert license_file == (ROOT / "LICENSE").read_bytes() and "License-Expression: BSD-3-Clause" in metadata
    assert wheel.name == f"{release}-py3-none-any.whl" and sdist.name == f"{release}.tar.gz"
    assert {name.split("/")[0] for name in names} == {"activity", f"{release}.dist-info"}  # the app alone
    assert (
        "activity/migrations/0001_initial.py" in names and "activity/templates/admin/activity/dashboard.html" in names
    )

    visit = run(["python", "-c", VISIT], site.path, {**site.env, "DJANGO_SETTINGS_MODULE": f"{SITE}.settings"})
    found = json.loads(visit.strip().splitlines()[-1])
    assert found["mount"] == site.mount == "/activity/"  # under a prefix, as the README mounts it
    assert found["app_from"].startswith(str(site.venv))  # the wheel's copy, not this checkout
    assert found["page"] == 200
    status, session = found["session"]
    assert status == 200 and [view["path"] for view in session["results"]] == ["/admin/"]
    status, seen = found["last_seen"]
    assert status == 200 and seen["user"] == found["pk"] and seen["online"] is True
    assert {"activity.flush", "activity.prune", "activity.sweep", "activity.rollup_day"} <= set(found["tasks"])
    with redis.Redis.from_url(site.env["REDIS_URL"]) as site_client:  # the site's Redis, this run's prefix
        home = partition_index(str(found["pk"]))  # the user's last-seen partition
        assert site_client.exists(f"{os.environ['ACTIVITY_KEY_PREFIX']}{{ls:{home}}}:seen")

    # Step 5's check against a Redis that keeps nothing on disk (the test suite's kind): the newcomer
    # is told how.
    (check,) = [line for line in readme_steps()[-1][1].splitlines() if "manage.py check" in line]
    with PrivateRedis() as throwaway:
        unsafe = subprocess.run(
            check,
            shell=True,
            cwd=site.path,
            env={**site.env, "REDIS_URL": throwaway.url},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert unsafe.returncode == 1 and "activity.W004" in unsafe.stderr and "appendonly yes" in unsafe.stderr

    # Under the prefix: the probes, the docs page, and the app's JSON 404; outside it, the site's own.
    served = found["served"]
    status, content_type, body = served["healthz"]
    assert (status, content_type, json.loads(body)) == (200, "application/json", {"redis": "ok", "database": "ok"})
    assert served["metrics"] == [200, "text/plain; charset=utf-8"]  # Prometheus' text format
    assert served["docs"] == [200, "text/html; charset=utf-8"]
    assert served["outside the prefix"] == [404, "text/html; charset=utf-8"]  # Django's debug 404
    assert served["the site's own view"] == [200, "application/json", '{"pong":true}']

    # The deploy checks judge the site's own views by nothing the README added (drf-spectacular's
    # check, which builds a document of every DRF view, is not installed).
    deploy = subprocess.run(
        ["python", "manage.py", "check", "--deploy"],
        cwd=site.path,
        env=site.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert deploy.returncode == 0 and "drf_spectacular" not in deploy.stderr, deploy.stderr

    # The site's REST_FRAMEWORK changed nothing: permissions, JSON errors, page sizes, throttles.
    refused = found["refused"]
    assert [status for status, _, _ in refused.values()] == [401, 403, 404, 404]
    for status, content_type, body in refused.values():
        assert content_type == "application/json" and json.loads(body)["detail"], (status, body)
    assert found["pages"] == [202, 3, 3, None]  # the session's own page size (20), not the site's 2
    assert found["x-permission"] == "activity.view_activity"
    unauthorized, last, (status, content_type, body), retry_after = found["throttle"]
    assert (unauthorized, last, status) == (120, 429, 429)  # anonymous: 120 a minute, then refused
    assert content_type == "application/json" and "throttled" in json.loads(body)["detail"]
    assert 0 < int(retry_after) <= 30

    out = run(["python", "manage.py", "activity_flush"], site.path, site.env)
    assert out.strip().startswith("activity_flush: 2 rows written in 1 batch;")  # the adopter, and walker
    rows = flushed_rows(site)
    assert [(user_id, str(account)) for user_id, account, _ in rows] == [(found["pk"], found["pk"]), ("walker", "None")]
    flushed = dt.datetime.fromisoformat(rows[0][2]).replace(tzinfo=dt.UTC).timestamp()
    assert seen["ts"] <= flushed < seen["ts"] + 60  # the API read itself is the user's latest activity


def flushed_rows(site: Site, user_id: str | None = None) -> list[tuple[str, int | None, str]]:
    """The site's UserActivity rows (all, or ``user_id``'s): (user_id, account_id, last_seen)."""
    query = "SELECT user_id, account_id, last_seen FROM activity_useractivity"
    with sqlite3.connect(site.path / "db.sqlite3", timeout=10) as db:
        if user_id is None:
            return db.execute(f"{query} ORDER BY user_id").fetchall()
        return db.execute(f"{query} WHERE user_id = ?", (user_id,)).fetchall()


def next_database(url: str) -> str:
    """``url``'s Redis, its next database: the site's Celery queue (``celery``) beside nothing of the
    suite's, which uses the run's own queue in the store's database."""
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(database + 1) % 16}"))


def start(command: list[str], site: Site, env: dict[str, str], log: Path) -> subprocess.Popen:
    """``command`` in the site, in a process group of its own, so stopping it takes its children too."""
    with log.open("wb") as out:
        return subprocess.Popen(
            command, cwd=site.path, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


@dataclass(frozen=True)
class Served:
    """The site running: its server's URL, a token of its superuser, and its Celery worker."""

    url: str
    token: str
    worker: subprocess.Popen
    worker_log: Path


@pytest.fixture(scope="module")
def served(site) -> Iterator[Served]:
    """The site's own ``runserver`` (DEBUG, as startproject made it, so it serves the static files) and
    ``celery -A mysite worker --beat``, both from the virtualenv, both stopped in the end."""
    env = {**site.env, "CELERY_BROKER_URL": next_database(site.env["REDIS_URL"])}
    url = f"http://127.0.0.1:{free_port()}"
    logs = site.path.parent
    processes = []
    try:
        worker_log = logs / "worker.log"
        worker = start(["celery", "-A", SITE, "worker", "--beat", "--loglevel", "INFO"], site, env, worker_log)
        processes.append(worker)
        server = ["python", "manage.py", "runserver", "--noreload", url.removeprefix("http://")]
        processes.append(start(server, site, env, logs / "runserver.log"))
        superuser = f"createsuperuser --noinput --username {OWNER} --email {OWNER}@example.com"
        run(f"python manage.py {superuser}", site.path, {**env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD})
        token = run(["python", "manage.py", "drf_create_token", OWNER], site.path, env).split()[2]
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}{site.mount}healthz", timeout=1):
                    break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline, (logs / "runserver.log").read_text()
                time.sleep(0.1)
        yield Served(url, token, worker, worker_log)
    finally:
        for process in processes:
            end(process, wait=20)  # SIGTERM, then whatever of its group is left


def test_the_docs_page_and_the_dashboard_load_everything_from_the_site(site, served, chromium):
    ARTIFACTS.mkdir(exist_ok=True)
    context = chromium.new_context(viewport={"width": 1400, "height": 1100})
    page = context.new_page()
    requested, failed = [], []
    page.on("request", lambda request: requested.append(request.url))
    page.on("requestfailed", lambda request: failed.append((request.url, request.failure)))
    page.on("response", lambda response: response.status >= 400 and failed.append((response.url, response.status)))
    try:
        page.goto(f"{served.url}/admin/login/?next=/admin/")
        page.fill("#id_username", OWNER)
        page.fill("#id_password", PASSWORD)
        page.click("input[type=submit]")
        # The dashboard opens the live stream, which runserver (WSGI) refuses with 406.
        with page.expect_response(lambda response: response.url.endswith("/api/v1/live/")) as live:
            page.click("text=Activity dashboard")  # linked from the site's own admin index
        assert live.value.status == 406
        page.wait_for_selector("#activity-panel .activity-charts svg")
        assert page.locator("#activity-panel .activity-charts svg").count() == 2  # daily actives, page views
        page.screenshot(path=str(ARTIFACTS / "install-dashboard.png"), full_page=True)

        page.goto(f"{served.url}{site.mount}api/v1/docs/")
        page.wait_for_selector(".swagger-ui .info", state="visible")
        assert "Activity tracking service" in page.text_content(".swagger-ui .info")
        page.wait_for_selector(f'.opblock-summary-path[data-path="{site.mount}api/v1/stats/"]')
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(ARTIFACTS / "install-docs.png"), full_page=True)
    finally:
        context.close()
    # runserver is a WSGI server: the live stream is refused there (406, seen above) and the panel
    # refreshes instead. The EventSource then drops the request, which Chromium may report as aborted.
    refused = (406, "net::ERR_ABORTED")
    assert [(url, why) for url, why in failed if not (url.endswith("/api/v1/live/") and why in refused)] == []
    assert {url.split("/", 3)[2] for url in requested} == {served.url.removeprefix("http://")}  # no CDN
    assert any("/static/drf_spectacular_sidecar/swagger-ui-dist/" in url for url in requested)


# After the browser's test, which runs while beat counts down to its first flush.
def test_a_celery_worker_with_beat_flushes_what_the_site_records(site, served, redis_client):
    events = json.dumps({"events": [{"user": "beat-walker", "path": "/pricing"}]}).encode()
    request = urllib.request.Request(
        f"{served.url}{site.mount}api/v1/events/",
        data=events,
        headers={"Authorization": f"Token {served.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 202
    deadline = time.monotonic() + FLUSH_WAIT_S
    while not (rows := flushed_rows(site, "beat-walker")):
        assert served.worker.poll() is None, served.worker_log.read_text()
        assert time.monotonic() < deadline, f"no flush in {FLUSH_WAIT_S} s:\n{served.worker_log.read_text()}"
        time.sleep(0.2)
    assert rows[0][1] is None  # an id of no Django user
    assert end(served.worker, wait=20) == 0, served.worker_log.read_text()  # a warm shutdown, beat with it
    log = served.worker_log.read_text()
    assert re.search(r"Task activity\.flush\[[\w-]+\] succeeded", log), log
