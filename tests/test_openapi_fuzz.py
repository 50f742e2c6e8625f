"""Schemathesis against the live OpenAPI document, through the WSGI app, as a staff user holding the
app's permissions and as a plain user (DRF tokens): every check, every phase (examples, which the
document has none of, coverage, fuzzing, and stateful over the links schemathesis infers), seeded
and deterministic, a bounded number of examples per operation. The document must describe the API
exactly: no 500, no undocumented status or header, no schema-valid request refused, no
schema-violating one accepted."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from rest_framework.authtoken.models import Token
from schemathesis.engine import events, from_schema
from schemathesis.transport.wsgi import WSGI_TRANSPORT

from activity import clock, conf
from activity.events import MAX_PATH_LENGTH, MIN_TS, Event
from activity.services import ingest
from activity.web.api.pagination import CURSOR_PATTERN, MAX_CURSOR_LENGTH, encode_cursor
from project.wsgi import application
from tests.conftest import with_permissions

SCHEMA_URL = "/api/v1/schema/?format=json"
NEXT_PAGES, WALKED_FROM = "/api/v1/pages/next/", "/fuzz/from"
RETENTION, FUZZ_GROUP = "/api/v1/retention/", "fuzz"
SETTINGS = {
    "seed": 14,
    "workers": 1,
    "generation": {"max-examples": 25, "deterministic": True, "database": "none"},
    "phases": {"stateful": {"max-steps": 10}},
    "cache": {"enabled": False},
}


def _within_the_clock(batch: list) -> None:
    """Keep each event's ``ts`` inside the window the API accepts (after the epoch, at most now +
    ACTIVITY_MAX_FUTURE_SKEW): the document states the window in words, since JSON Schema has no
    "now". A replacement is of the same schema type, so negative cases stay negative."""
    latest = clock.now() + conf.settings.MAX_FUTURE_SKEW
    for event in batch:
        ts = event.get("ts") if isinstance(event, dict) else None
        if isinstance(ts, (int, float)) and not isinstance(ts, bool) and ts > latest:
            event["ts"] = clock.now()
        elif isinstance(ts, str):
            try:
                moment = datetime.fromisoformat(ts)
            except ValueError:
                continue
            if moment.tzinfo is not None and not MIN_TS <= moment.timestamp() <= latest:
                event["ts"] = datetime.now(UTC).isoformat()


def what_json_schema_cannot_say(context: Any, case: schemathesis.Case) -> schemathesis.Case:
    """Adjust generated values the document allows but the API cannot: timestamps past now + skew
    (or, as ISO strings, before the epoch), and cursors: a cursor is opaque, only one from a ``next``
    link is valid, so a generated one that the document allows is replaced by a real one. Likewise a
    page asked for its next pages is known only once some page followed it: a generated one the
    document allows is replaced by the page the test walked from. A retention table of weeks stops
    at 26 cohorts and periods where days go to 90 (the document states it in words), and its group
    is known only once created: a generated one the document allows becomes the test's group."""
    if isinstance(case.body, dict) and isinstance(case.body.get("events"), list):
        _within_the_clock(case.body["events"])
    cursor = (case.query or {}).get("cursor")
    if isinstance(cursor, str) and len(cursor) <= MAX_CURSOR_LENGTH and re.fullmatch(CURSOR_PATTERN, cursor):
        case.query["cursor"] = encode_cursor(clock.now() - 10, "fuzz")
    query = case.query or {}
    if case.operation.path == RETENTION and query.get("period") == "week":
        for name in ("cohorts", "periods"):  # the document's bound is the days' (90); weeks stop at 26
            value = query.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and 26 < value <= 90:
                query[name] = 26
    group = query.get("group") if case.operation.path == RETENTION else None
    if isinstance(group, str) and re.fullmatch(r"[1-9][0-9]{0,18}", group):
        group = int(group)
    if isinstance(group, int) and not isinstance(group, bool) and 1 <= group < 2**63:
        query["group"] = Group.objects.get(name=FUZZ_GROUP).pk  # a group is known only once it exists
    page = query.get("path")
    if case.operation.path == NEXT_PAGES and isinstance(page, str) and 1 <= len(page) <= MAX_PATH_LENGTH:
        case.query["path"] = WALKED_FROM
    return case


def run_schemathesis(token: str) -> tuple[list[str], int]:
    """(failures and errors as text, cases run) of one full run with ``token``'s credentials."""
    config = schemathesis.Config.from_dict({**SETTINGS, "headers": {"Authorization": f"Token {token}"}})
    schema = schemathesis.openapi.from_wsgi(SCHEMA_URL, application, config=config)
    schema.hook("map_case")(what_json_schema_cannot_say)
    problems: list[str] = []
    cases = 0
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            cases += len(event.recorder.cases)
            for checks in event.recorder.checks.values():
                for check in checks:
                    if check.failure_info is not None:
                        failure = check.failure_info.failure
                        problems.append(
                            f"{event.recorder.label} [{check.name}] {failure.title}: {failure.message}\n"
                            f"  {check.failure_info.code_sample}"
                        )
        elif isinstance(event, events.NonFatalError):
            problems.append(f"{event.label}: error {event.value!r}")
        elif isinstance(event, events.FatalError):
            problems.append(f"fatal: {event.exception!r}")
    return problems, cases


@pytest.fixture
def wsgi_probes_without_socket_options(monkeypatch):
    """schemathesis 4.32.5's ``ignored_auth`` probe hands the run's socket options (max_redirects,
    verify, cert) to the in-process WSGI client, which has no such arguments and raises TypeError;
    drop them there, as the WSGI transport does for its own requests."""
    send = WSGI_TRANSPORT.send
    socket_options = ("max_redirects", "verify", "cert", "proxies")

    def send_in_process(case, **kwargs):
        return send(case, **{name: value for name, value in kwargs.items() if name not in socket_options})

    monkeypatch.setattr(WSGI_TRANSPORT, "send", send_in_process)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("permitted", [True, False], ids=["staff-with-the-permissions", "plain-user"])
def test_schemathesis_finds_nothing(permitted, wsgi_probes_without_socket_options, redis_client):
    user = get_user_model().objects.create_user("fuzz", is_staff=permitted)
    if permitted:
        user = with_permissions(user)
    ingest.record_events([Event("walker", clock.now(), WALKED_FROM), Event("walker", clock.now(), "/fuzz/to")])
    Group.objects.create(name=FUZZ_GROUP)
    problems, cases = run_schemathesis(Token.objects.create(user=user).key)
    assert cases > 100
    assert problems == [], "\n".join(dict.fromkeys(problems))
