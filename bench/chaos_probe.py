"""The chaos run's reader (``bench.chaos``): a Django process on the rig's configuration, asked
through its stdin for what the service holds (``Probe``), so the bench itself never imports Django.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import chaos_retries
from bench.harness import end

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    """``--probe``: JSON requests on stdin, one reply a line on stdout, on the rig's environment."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    from django.db import connection

    operations: dict[str, Callable[[dict[str, Any]], Any]] = {
        "prepare": _prepare,
        "status": _status,
        "read": _read,
        "db": lambda request: _database(request["users"]),
        "counted": lambda request: chaos_retries.counted(request["users"]),
    }
    for line in sys.stdin:
        request = json.loads(line)
        for _attempt in (1, 2):  # a second time on a new connection: the database may have restarted
            try:
                reply = {"ok": operations[request["op"]](request)}
                break
            except Exception as error:  # reported to the bench, which decides; the probe goes on
                connection.close()
                reply = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(reply), flush=True)


def _prepare(request: dict[str, Any]) -> dict[str, Any]:
    """An API token allowed to ingest, and ``pages`` members each with a signed-in session."""
    from datetime import timedelta

    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.contrib.auth.models import Permission
    from django.contrib.sessions.backends.db import SessionStore
    from django.contrib.sessions.models import Session
    from django.utils import timezone
    from django.utils.crypto import get_random_string
    from rest_framework.authtoken.models import Token

    from activity import permissions
    from activity.services import tracking

    users = get_user_model()
    ingester, _ = users.objects.get_or_create(username="chaos-ingest")
    app, codename = permissions.INGEST_EVENTS.split(".")
    ingester.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    token, _ = Token.objects.get_or_create(user=ingester)
    first = users.objects.count()
    members = [users(username=f"chaos-page-{first + n}") for n in range(request["pages"])]
    for member in members:
        member.set_unusable_password()
    members = users.objects.bulk_create(members)
    store, expires = SessionStore(), timezone.now() + timedelta(days=1)
    sessions = [
        Session(
            session_key=get_random_string(32, "abcdefghijklmnopqrstuvwxyz0123456789"),
            session_data=store.encode(
                {
                    SESSION_KEY: str(member.pk),
                    BACKEND_SESSION_KEY: settings.AUTHENTICATION_BACKENDS[0],
                    HASH_SESSION_KEY: member.get_session_auth_hash(),
                }
            ),
            expire_date=expires,
        )
        for member in members
    ]
    Session.objects.bulk_create(sessions)
    return {
        "token": token.key,
        "pages": [[str(m.pk), s.session_key] for m, s in zip(members, sessions, strict=True)],
        "batch_ms": tracking.BATCH_MS,
        "backoff": tracking.FAIL_OPEN_BACKOFF,
    }


def _status(request: dict[str, Any]) -> dict[str, Any]:
    from activity.services import flush

    return flush.status().as_dict()


def _database(users: list[str]) -> dict[str, float]:
    from activity.models import UserActivity

    found: dict[str, float] = {}
    for start in range(0, len(users), 500):
        rows = UserActivity.objects.filter(user_id__in=users[start : start + 500])
        found.update((user, seen.timestamp()) for user, seen in rows.values_list("user_id", "last_seen"))
    return found


def _read(request: dict[str, Any]) -> dict[str, Any]:
    """Last seen of ``users`` in Redis (the service's own read) and in the database."""
    from activity.services import last_seen

    users = request["users"]
    held: dict[str, float | None] = {}
    for start in range(0, len(users), 1000):
        held.update(last_seen.get_many(users[start : start + 1000]))
    return {"redis": {user: ts for user, ts in held.items() if ts is not None}, "db": _database(users)}


class Probe:
    """The reader process: ``ask()`` sends one request and returns its reply."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.chaos", "--probe"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            process_group=0,
        )

    def ask(self, op: str, **request: Any) -> Any:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"op": op, **request}) + "\n")
        self.process.stdin.flush()
        reply = json.loads(self.process.stdout.readline())
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["ok"]

    def stop(self) -> None:
        end(self.process)
