"""Schemathesis against the live OpenAPI document, through the WSGI app, as a staff user holding the
app's permissions and as a plain user (DRF tokens): every check (each built-in one but
``max_response_time``, a time limit: the run asserts they all ran), every phase (examples, which
the document has none of, coverage, fuzzing, and stateful over the links schemathesis infers),
seeded and deterministic, a bounded number of examples per operation. The document must describe
the API exactly: no 500, no undocumented status or header, no schema-valid request refused (ST202),
no schema-violating one accepted.

Generated values pass as generated, but for the four rules JSON Schema cannot state: a ``ts`` no
later than now plus the skew (there is no "now" in a schema), retention's weeks stopping at 26
where days go to 90 (a bound of one parameter set by another), and an ``Idempotency-Key`` that
came with another body before (state: 422), which is made unique per case; and at most 32 funnels
defined at once (state: 400), so the funnels defined are deleted before a definition would pass
that. The document states all four in words.
A well-formed cursor, group, page or path that names nothing is answered as the document says:
a cursor of the documented form is always a position; an unknown group or a page nothing followed
is a 404, which the check accepts for a well-formed request."""

from __future__ import annotations

import gc
import itertools
import re
from datetime import UTC, datetime
from typing import Any

import pytest
import schemathesis
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from schemathesis.engine import events, from_schema
from schemathesis.transport.wsgi import WSGI_TRANSPORT

from activity import clock, conf
from activity.events import MIN_TS
from activity.funnel_rules import MAX_FUNNELS
from activity.models import Funnel
from project.wsgi import application
from tests.conftest import with_permissions

SCHEMA_URL = "/api/v1/schema/?format=json"
RETENTION = "/api/v1/retention/"
FUNNELS = "/api/v1/funnels/"
SETTINGS = {
    "seed": 14,
    "workers": 1,
    "generation": {"max-examples": 25, "deterministic": True, "database": "none"},
    "checks": {"enabled": True},
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


IDEMPOTENCY_KEY = re.compile(r"[!-~]([ -~]{0,253}[!-~])?")
_cases = itertools.count()


def what_json_schema_cannot_say(context: Any, case: schemathesis.Case) -> schemathesis.Case:
    """Adjust generated values the document allows but the API cannot: timestamps past now + skew
    (or, as ISO strings, before the epoch), a retention table of weeks past 26 cohorts or periods
    (the document's bound is the days' 90), a valid ``Idempotency-Key`` that an earlier case
    may have sent with another body (made unique, still valid), and a funnel past the 32 defined."""
    if isinstance(case.body, dict) and isinstance(case.body.get("events"), list):
        _within_the_clock(case.body["events"])
    key = (case.headers or {}).get("Idempotency-Key")
    if isinstance(key, str) and IDEMPOTENCY_KEY.fullmatch(key):
        case.headers["Idempotency-Key"] = f"{key[:240]}.{next(_cases):012d}"
    if case.operation.path == FUNNELS and case.method.upper() == "POST" and Funnel.objects.count() >= MAX_FUNNELS:
        Funnel.objects.all().delete()
    query = case.query or {}
    if case.operation.path == RETENTION and query.get("period") == "week":
        for name in ("cohorts", "periods"):
            value = query.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and 26 < value <= 90:
                query[name] = 26
    return case


def run_schemathesis(token: str) -> tuple[list[str], int, set[str]]:
    """(failures and errors as text, cases run, names of the checks run) of one full run with
    ``token``'s credentials."""
    config = schemathesis.Config.from_dict({**SETTINGS, "headers": {"Authorization": f"Token {token}"}})
    schema = schemathesis.openapi.from_wsgi(SCHEMA_URL, application, config=config)
    schema.hook("map_case")(what_json_schema_cannot_say)
    problems: list[str] = []
    cases = 0
    ran: set[str] = set()
    for event in from_schema(schema).execute():
        if isinstance(event, events.ScenarioFinished):
            cases += len(event.recorder.cases)
            for checks in event.recorder.checks.values():
                for check in checks:
                    ran.add(check.name)
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
    # The run's thread has ended, but its database connection (kept CONN_MAX_AGE seconds) closes only
    # when the cycle collector frees it: collected now, so PostgreSQL can drop the test database.
    gc.collect()
    return problems, cases, ran


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
    problems, cases, ran = run_schemathesis(Token.objects.create(user=user).key)
    assert cases > 100
    # Every check registered (max_response_time is a configured limit, not one of them).
    assert ran == set(schemathesis.checks.CHECKS.get_all_names()), ran
    assert problems == [], "\n".join(dict.fromkeys(problems))
