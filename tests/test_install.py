"""The app as a site adopts it: build the sdist and the wheel, install the wheel in a fresh virtualenv
beside a brand-new ``django-admin startproject`` site, follow the README's "Adding it to a site"
section word for word, migrate, record a page view through the middleware, read it back through
the API, and run one flush.

The site has a ``REST_FRAMEWORK`` of its own before it adopts the app, one the app must not depend
on (``SITE_REST_FRAMEWORK``: anyone allowed, the browsable renderer first, pages of 2, no
throttles), and the app's API still needs its permissions (401 and 403), answers JSON errors and
its own page sizes, and throttles at its own rates.

The section's Python blocks are appended to the file their first line names and its shell lines are
run as written, in the site's directory, with the fresh virtualenv first on ``PATH``. Besides that
``REST_FRAMEWORK``, the one thing the test adds is where pip finds the package: a constraint
pointing ``django-redis-activity`` at the wheel just built (and Django at the version this suite
runs on, so a Django 4.2 run installs 4.2).
The site reads ``REDIS_URL`` and ``ACTIVITY_KEY_PREFIX`` from the environment as the README's
settings do, so it uses this run's key prefix and a Redis of the test's own set up as the loss budget
asks (AOF and RDB on: ``make run``'s kind): step 5's ``check --fail-level WARNING`` fails on a Redis
that keeps nothing on disk (``activity.W004``), such as the run's own, and the test shows that too.
Needs PyPI (or a pip cache) for the dependencies: about a minute. Deselect with ``-m 'not install'``;
CI runs it.
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
import zipfile
from pathlib import Path

import django
import pytest
import redis

import activity
from project.redis_server import PrivateRedis

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "django-redis-activity"
SITE = "mysite"


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

# Run in the site with the fresh virtualenv's Python: a signed-in superuser views a page, then reads
# it back through the API with a token; then the API as others see it, under the site's
# REST_FRAMEWORK: what the test checks is printed as JSON.
VISIT = """
import json, os, time
import django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()  # lets the test client's host in
from celery import current_app
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
import activity

user = get_user_model().objects.create_superuser("adopter", "adopter@example.com", "not-used")
browser = Client(HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0")
browser.force_login(user)  # a person's browser: a request without a user agent counts as a bot
page = browser.get("/admin/")
api = Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
deadline = time.monotonic() + 10  # the middleware's batch goes within tracking.BATCH_MS (50 ms)
while (session := api.get(f"/api/v1/users/{user.pk}/session/")).status_code == 404 and time.monotonic() < deadline:
    time.sleep(0.02)
seen = api.get(f"/api/v1/users/{user.pk}/last-seen/")

def answer(response):
    return [response.status_code, response["Content-Type"], response.content.decode()[:200]]

member = Client()
member.force_login(get_user_model().objects.create_user("member"))
browser_accept = "text/html,application/xhtml+xml,*/*;q=0.8"
refused = {
    "anonymous": answer(Client().get("/api/v1/online/", HTTP_ACCEPT=browser_accept)),
    "member": answer(member.get("/api/v1/online/", HTTP_ACCEPT=browser_accept)),
    "unknown path": answer(api.get("/api/v1/no-such-route/")),
}
views = [{"user": "walker", "path": f"/p{n}"} for n in range(3)]
ingested = api.post("/api/v1/events/", {"events": views}, content_type="application/json").status_code
walker = api.get("/api/v1/users/walker/session/").json()
document = api.get("/api/v1/schema/?format=json").json()

from activity import clock  # a fixed moment mid-minute: the 121 requests share one window
moment = time.time()
moment += 30 - moment % 60
clock.now = lambda: moment
stranger = Client(REMOTE_ADDR="203.0.113.9")
codes = [stranger.get("/api/v1/stats/").status_code for _ in range(121)]
throttled = stranger.get("/api/v1/stats/")
print(json.dumps({
    "pk": str(user.pk),
    "page": page.status_code,
    "session": [session.status_code, session.json()],
    "last_seen": [seen.status_code, seen.json()],
    "app_from": activity.__file__,
    "tasks": sorted(name for name in current_app.tasks if name.startswith("activity.")),
    "refused": refused,
    "pages": [ingested, walker["count"], len(walker["results"]), walker["next"]],
    "x-permission": document["paths"]["/api/v1/stats/"]["get"].get("x-permission"),
    "throttle": [codes.count(401), codes[-1], answer(throttled), throttled.get("Retry-After")],
}))
"""


def test_the_wheel_installs_into_a_new_site_by_the_readme(tmp_path, request):
    # The sdist, then the wheel built from it (python -m build's default), as a release makes them.
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--outdir", str(dist), str(ROOT)], ROOT, dict(os.environ))
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        packaged = {Path(name).name: archive.read(name) for name in names if name.startswith("activity/lua/")}
    assert packaged == {path.name: path.read_bytes() for path in (ROOT / "lua").glob("*.lua")}
    release = f"django_redis_activity-{activity.__version__}"
    assert wheel.name == f"{release}-py3-none-any.whl" and sdist.name == f"{release}.tar.gz"
    assert {name.split("/")[0] for name in names} == {"activity", f"{release}.dist-info"}  # the app alone
    assert (
        "activity/migrations/0001_initial.py" in names and "activity/templates/admin/activity/dashboard.html" in names
    )

    # A fresh virtualenv; pip takes the package from the wheel just built and the rest from the index.
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path, dict(os.environ))
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(f"{DISTRIBUTION} @ {wheel.as_uri()}\nDjango=={django.get_version()}\n")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV", "DATABASE_URL"}
    }
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}", PIP_CONSTRAINT=str(constraints))
    site_redis = PrivateRedis(data_dir=tmp_path / "redis").start()  # persistent, as make run's
    request.addfinalizer(site_redis.stop)
    env["REDIS_URL"] = site_redis.url
    # The site as it was before: Django, and a project django-admin made.
    run(["pip", "install", "--quiet", "Django"], tmp_path, env)
    site = tmp_path / "site"
    site.mkdir()
    run(["django-admin", "startproject", SITE, str(site)], tmp_path, env)
    with (site / SITE / "settings.py").open("a") as file:
        file.write(SITE_REST_FRAMEWORK)

    steps = readme_steps()
    assert [language for language, _ in steps] == ["sh", "python", "python", "python", "python", "sh"]
    for language, text in steps:
        if language == "python":
            target, body = text.split("\n", 1)
            assert target.startswith(f"# {SITE}/"), target
            with (site / target.removeprefix("# ")).open("a") as file:
                file.write("\n" + body)
        else:
            for line in filter(None, text.splitlines()):
                run(line, site, env)

    # Step 5 against a Redis that keeps nothing on disk (the test suite's kind): the newcomer is told how.
    with PrivateRedis() as throwaway:
        unsafe = subprocess.run(
            ["python", "manage.py", "check", "--fail-level", "WARNING"],
            cwd=site,
            env={**env, "REDIS_URL": throwaway.url},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert unsafe.returncode == 1 and "activity.W004" in unsafe.stderr and "appendonly yes" in unsafe.stderr

    visit = run(["python", "-c", VISIT], site, {**env, "DJANGO_SETTINGS_MODULE": f"{SITE}.settings"})
    found = json.loads(visit.strip().splitlines()[-1])
    assert found["app_from"].startswith(str(venv))  # the wheel's copy, not this checkout
    assert found["page"] == 200
    status, session = found["session"]
    assert status == 200 and [view["path"] for view in session["results"]] == ["/admin/"]
    status, seen = found["last_seen"]
    assert status == 200 and seen["user"] == found["pk"] and seen["online"] is True
    assert {"activity.flush", "activity.prune", "activity.sweep", "activity.rollup_day"} <= set(found["tasks"])
    with redis.Redis.from_url(site_redis.url) as site_client:  # the site's Redis, this run's prefix
        assert site_client.exists(f"{os.environ['ACTIVITY_KEY_PREFIX']}{{ls}}:seen")

    # The site's REST_FRAMEWORK changed nothing: permissions, JSON errors, page sizes, throttles.
    refused = found["refused"]
    assert [refused[who][0] for who in ("anonymous", "member", "unknown path")] == [401, 403, 404]
    for status, content_type, body in refused.values():
        assert content_type == "application/json" and json.loads(body)["detail"], (status, body)
    assert found["pages"] == [202, 3, 3, None]  # the session's own page size (20), not the site's 2
    assert found["x-permission"] == "activity.view_activity"
    unauthorized, last, (status, content_type, body), retry_after = found["throttle"]
    assert (unauthorized, last, status) == (120, 429, 429)  # anonymous: 120 a minute, then refused
    assert content_type == "application/json" and "throttled" in json.loads(body)["detail"]
    assert 0 < int(retry_after) <= 30

    out = run(["python", "manage.py", "activity_flush"], site, env)
    assert out.strip().startswith("activity_flush: 2 rows written in 1 batch;")  # the adopter, and walker
    with sqlite3.connect(site / "db.sqlite3") as db:
        rows = db.execute(
            "SELECT user_id, account_id, last_seen FROM activity_useractivity ORDER BY user_id"
        ).fetchall()
    assert [(user_id, str(account)) for user_id, account, _ in rows] == [(found["pk"], found["pk"]), ("walker", "None")]
    flushed = dt.datetime.fromisoformat(rows[0][2]).replace(tzinfo=dt.UTC).timestamp()
    assert seen["ts"] <= flushed < seen["ts"] + 60  # the API read itself is the user's latest activity
