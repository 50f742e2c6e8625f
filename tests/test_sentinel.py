"""Redis Sentinel: a ``redis+sentinel://`` ``REDIS_URL`` makes the store, and the example project's
Celery, follow the primary the sentinels name.

The failover tests start a real topology on loopback (``project.redis_server.PrivateSentinels``: a
primary, its replica, three sentinels with quorum 2), never touching the run's own Redis. Under a
steady load of tracked pages and event POSTs the primary is SIGKILLed; the test measures how long the
API refused, how many events it refused, and whether any acknowledged event failed to reach the
database. A planned failover (``SENTINEL FAILOVER``) measures what the demoted primary took, and a
real Celery worker follows the kill. They need a system ``redis-server`` (it runs as a sentinel with
``--sentinel``) and skip without one; ``-m 'not sentinel'`` leaves them out. docs/sentinel.md quotes
what they print.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
from celery import Celery
from django.conf import settings
from django.db import connections
from django.test import override_settings

from activity.conf import SentinelURL, celery_redis, parse_sentinel_url
from activity.models import UserActivity
from activity.services import flush, tracking
from activity.store.client import SENTINEL_RECHECK_S
from project.redis_server import PrivateSentinels, sentinel_binary
from tests.celery_procs import worker
from tests.clients import Client

ROOT = Path(__file__).resolve().parent.parent
EVENTS = "/api/v1/events/"
PAGE = "/pricing"
LOAD_BEFORE = 3.0  # seconds of steady load before the kill
LOAD_AFTER = 4.0  # seconds of load once the API serves again
RESUME_WITHIN = 30.0  # the promise: service resumes within this long of the kill, without a restart
PAUSE = 0.02  # between one load thread's requests
PLANNED_LOAD = 4.0  # seconds of POSTs after a planned failover is asked for

needs_sentinel = pytest.mark.skipif(
    sentinel_binary() is None, reason="no system redis-server to run Redis Sentinel with"
)


# --- the URL and what the example project derives from it ----------------------------------------


def test_a_sentinel_url_is_taken_apart():
    found = parse_sentinel_url("redis+sentinel://:p%40ss@10.0.0.1:26379,[::1]:26380,sentinel-c/mymaster/2")
    assert found == SentinelURL(
        sentinels=(("10.0.0.1", 26379), ("::1", 26380), ("sentinel-c", 26379)),
        service="mymaster",
        db=2,
        password="p@ss",
    )
    assert parse_sentinel_url("redis+sentinel://127.0.0.1:1/svc") == SentinelURL((("127.0.0.1", 1),), "svc")
    assert parse_sentinel_url("redis://127.0.0.1:6379/0") is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("redis+sentinel://127.0.0.1:26379", "names no service"),
        ("redis+sentinel://127.0.0.1:26379/", "names no service"),
        ("redis+sentinel://127.0.0.1:port/svc", "not a port number"),
        ("redis+sentinel://127.0.0.1:70000/svc", "not a port number"),
        ("redis+sentinel://127.0.0.1:1,,127.0.0.1:2/svc", "address is empty"),
        ("redis+sentinel://127.0.0.1:1/svc/zero", "not a number"),
        ("redis+sentinel://127.0.0.1:1/svc/0?ssl=true", "no query"),
        ("redis+sentinel://[::1/svc", "not [IPv6]:port"),
    ],
)
def test_a_sentinel_url_that_is_not_whole_says_what_is_wrong(url, reason):
    with pytest.raises(ValueError, match=re.escape(reason)) as raised:
        parse_sentinel_url(url)
    assert "redis+sentinel://[[user]:password@]host:port" in str(raised.value)  # and what the form is


def test_celery_gets_kombus_sentinel_form_and_the_master_name():
    url = "redis+sentinel://:p%40ss@127.0.0.1:26379,127.0.0.1:26380/mymaster/3"
    assert celery_redis(url) == (
        "sentinel://:p%40ss@127.0.0.1:26379/3;sentinel://:p%40ss@127.0.0.1:26380/3",
        {"master_name": "mymaster"},
    )
    for other in ("redis://127.0.0.1:6379/1", "amqp://guest@localhost//", "redis+sentinel://127.0.0.1:1/"):
        assert celery_redis(other) == (other, {})  # the last one is activity.E006's to report


def test_the_example_project_derives_celerys_broker_and_results_from_a_sentinel_redis_url():
    script = """
import importlib, json, os, sys
import project.settings as s
for env in json.loads(sys.argv[1]):
    for name in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        os.environ.pop(name, None)
    os.environ.update(env)
    importlib.reload(s)
    print(s.CELERY_BROKER_URL, s.CELERY_BROKER_TRANSPORT_OPTIONS, s.CELERY_RESULT_BACKEND,
          s.CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS)
"""
    environments = [
        {"REDIS_URL": "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/svc/0"},
        # A broker given a Sentinel URL of its own is converted the same way.
        {
            "REDIS_URL": "redis+sentinel://127.0.0.1:26379/svc/0",
            "CELERY_BROKER_URL": "redis+sentinel://127.0.0.1:26379/svc/2",
        },
        {"REDIS_URL": "redis://127.0.0.1:6379/0"},
    ]
    derived = subprocess.run(
        [sys.executable, "-c", script, json.dumps(environments)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    # Database 1 beside the store's 0, as for a plain REDIS_URL (activity.W005).
    both = "sentinel://127.0.0.1:26379/1;sentinel://127.0.0.1:26380/1 {'master_name': 'svc'}"
    one = "sentinel://127.0.0.1:26379/{} {{'master_name': 'svc'}}"
    plain = "redis://127.0.0.1:6379/1 {}"
    assert derived == [f"{both} {both}", f"{one.format(2)} {one.format(1)}", f"{plain} {plain}"]


# --- a real failover under load -------------------------------------------------------------------


def serving(url: str) -> override_settings:
    """Point the service at ``url``: a topology of this file's own, never the run's Redis (which is a
    cluster on the cluster pass, hence the setting)."""
    return override_settings(REDIS_URL=url, ACTIVITY_REDIS_CLUSTER=False)


@pytest.fixture
def topology() -> Iterator[PrivateSentinels]:
    with PrivateSentinels() as sentinels:
        yield sentinels


@dataclass(frozen=True, slots=True)
class Answer:
    start: float  # time.monotonic() when sent
    end: float
    status: int
    retry_after: str | None
    users: tuple[str, ...] = ()  # the events' users (each one used once) and their ts
    ts: float = 0.0


@dataclass
class Load:
    """One thread sending ``send(n)`` (n = 0, 1, ...) until stopped, keeping every answer."""

    send: Callable[[int], Answer]
    answers: list[Answer] = field(default_factory=list)
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self, name: str) -> Load:
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            n = 0
            while not self._stop.is_set():
                self.answers.append(self.send(n))
                n += 1
                time.sleep(PAUSE)
        except BaseException as error:
            self.error = error
        finally:
            connections.close_all()  # this thread's database connection

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()
        assert self.error is None, repr(self.error)


def post_events(api) -> Callable[[int], Answer]:
    run = os.urandom(3).hex()

    def send(n: int) -> Answer:
        users, ts = (f"ha-{run}-{n}-a", f"ha-{run}-{n}-b"), time.time()
        start = time.monotonic()
        response = api.post(EVENTS, {"events": [{"user": user, "ts": ts} for user in users]}, format="json")
        return Answer(start, time.monotonic(), response.status_code, response.get("Retry-After"), users, ts)

    return send


def get_pages(browser: Client) -> Callable[[int], Answer]:
    def send(n: int) -> Answer:
        start = time.monotonic()
        response = browser.get(PAGE)
        return Answer(start, time.monotonic(), response.status_code, response.get("Retry-After"))

    return send


def first(answers: list[Answer], condition: Callable[[Answer], bool]) -> Answer | None:
    return next((answer for answer in list(answers) if condition(answer)), None)


def wait_until(condition: Callable[[], object], timeout: float, what: str) -> float:
    """time.monotonic() when ``condition()`` first held."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return time.monotonic()


def flushed(users: list[str]) -> dict[str, datetime]:
    return dict(UserActivity.objects.filter(user_id__in=users).values_list("user_id", "last_seen"))


def missing(answers: list[Answer], rows: dict[str, datetime]) -> list[str]:
    """The users of ``answers`` whose row is absent or older than the event."""
    return [
        user
        for answer in answers
        for user in answer.users
        if user not in rows or rows[user].timestamp() < round(answer.ts, 3) - 0.0005
    ]


@pytest.mark.sentinel
@needs_sentinel
@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.pages")
def test_a_failover_under_load_refuses_only_during_the_election_and_loses_no_acknowledged_event(
    topology, staff_api, member, capsys
):
    browser = Client()
    browser.force_login(member)
    tracking.fail_open.reset()
    replica = ("127.0.0.1", topology.replica.port)
    with serving(topology.url):
        assert staff_api.post(EVENTS, {"events": [{"user": "ha-warm"}]}, format="json").status_code == 202
        events = Load(post_events(staff_api)).start("sentinel-events")
        pages = Load(get_pages(browser)).start("sentinel-pages")
        try:
            time.sleep(LOAD_BEFORE)
            killed = time.monotonic()
            topology.kill_primary()
            switched = wait_until(lambda: topology.master_address() == replica, RESUME_WITHIN, "the sentinels' switch")
            served_again = lambda: first(events.answers, lambda a: a.start > killed and a.status == 202)  # noqa: E731
            wait_until(
                served_again, killed + RESUME_WITHIN - time.monotonic(), "an event POST answered 202 after the kill"
            )
            resumed = served_again().start
            time.sleep(LOAD_AFTER)
        finally:
            events.stop()
            pages.stop()
        result = flush.flush()
    fail_opens = tracking.fail_open.failures
    tracking.fail_open.reset()

    # Pages never fail: tracking fails open while no primary is known.
    assert pages.answers and {answer.status for answer in pages.answers} == {200}

    # The API: 202 before the kill; 503 with Retry-After only between the kill and the first 202
    # after it (the election); 202 from then on; nothing else, ever.
    sent = events.answers
    assert {answer.status for answer in sent} <= {202, 503}, sorted({answer.status for answer in sent})
    before = [answer for answer in sent if answer.end < killed]
    assert before and all(answer.status == 202 for answer in before)
    refused = [answer for answer in sent if answer.status == 503]
    assert refused, "the kill was not seen: no request was refused"
    assert all(answer.retry_after and int(answer.retry_after) > 0 for answer in refused)
    assert all(answer.end > killed and answer.start < resumed for answer in refused)
    after = [answer for answer in sent if answer.start >= resumed]
    assert after and all(answer.status == 202 for answer in after)
    assert resumed - killed < RESUME_WITHIN

    # Every event acknowledged after the kill (so by the new primary) is in the database after the
    # flush. Before the kill, the budget is the replication lag at that moment: measured, reported.
    taken_over = [answer for answer in sent if answer.status == 202 and answer.start > killed]
    acknowledged_before = [answer for answer in sent if answer.status == 202 and answer.start <= killed]
    rows = flushed([user for answer in taken_over + acknowledged_before for user in answer.users])
    assert missing(taken_over, rows) == []
    lost_before = missing(acknowledged_before, rows)
    assert result.remaining == 0

    with capsys.disabled():
        print(
            f"\nsentinel failover (SIGKILL of the primary, down-after 1 s): sentinels switched after "
            f"{switched - killed:.2f} s; API unavailable {resumed - killed:.2f} s "
            f"(503s from {min(a.start for a in refused) - killed:+.2f} s "
            f"to {max(a.end for a in refused) - killed:+.2f} s), "
            f"{len(refused)} requests / {sum(len(a.users) for a in refused)} events refused; "
            f"{sum(len(a.users) for a in taken_over)} events acknowledged after the kill, 0 lost; "
            f"{len(lost_before)} of {sum(len(a.users) for a in acknowledged_before)} acknowledged before it lost; "
            f"pages: {len(pages.answers)} answered, all 200, {fail_opens} tracking sends failed open"
        )


@pytest.mark.sentinel
@needs_sentinel
@pytest.mark.django_db(transaction=True)
def test_a_planned_failover_loses_at_most_the_writes_until_the_store_rechecks(topology, staff_api, capsys):
    """``SENTINEL FAILOVER`` with the primary alive: connections open to it keep being accepted until
    the sentinels demote it (about 10 s later), and what it takes meanwhile is lost. The store asks
    the sentinels again every ``SENTINEL_RECHECK_S``, which bounds that to the moments between the
    promotion and its next question; every event acknowledged after that is in the database."""
    send = post_events(staff_api)
    replica = ("127.0.0.1", topology.replica.port)
    sent: list[Answer] = []
    with serving(topology.url):
        sent.append(send(0))  # a pooled connection to the primary
        asked = time.monotonic()
        with topology.sentinel() as sentinel:
            sentinel.execute_command("SENTINEL", "FAILOVER", topology.service)
        switched = None
        while time.monotonic() < asked + PLANNED_LOAD:
            sent.append(send(len(sent)))
            if switched is None and topology.master_address() == replica:
                switched = time.monotonic()
            time.sleep(PAUSE)
    # What survives is what the promoted replica holds: the old primary, demoted later, drops the
    # rest when it resyncs from it. (Flushed through the Sentinel URL now, it could still be read from
    # the old primary by a connection that never moved.)
    with serving(topology.replica.url):
        assert flush.flush().remaining == 0
    assert switched is not None, "the sentinels did not switch"
    assert {answer.status for answer in sent} <= {202, 503}
    acknowledged = [answer for answer in sent if answer.status == 202]
    rows = flushed([user for answer in acknowledged for user in answer.users])
    lost = [answer for answer in acknowledged if missing([answer], rows)]
    settled = switched + SENTINEL_RECHECK_S + 0.25  # a question due then has been asked
    assert [answer for answer in lost if answer.start > settled] == []
    window = max((answer.end for answer in lost), default=asked) - asked
    assert window < SENTINEL_RECHECK_S + 2.5, f"acknowledged events lost until {window:.2f} s after the failover"
    with capsys.disabled():
        print(
            f"\nsentinel planned failover (SENTINEL FAILOVER, primary alive): "
            f"switch seen after {switched - asked:.2f} s; "
            f"{sum(len(a.users) for a in lost)} of {sum(len(a.users) for a in acknowledged)} acknowledged events lost, "
            f"acknowledged up to {window:.2f} s after the failover began; "
            f"{sum(len(a.users) for a in sent if a.status == 503)} events refused"
        )


@pytest.mark.sentinel
@pytest.mark.celery
@needs_sentinel
@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_on_the_derived_broker_follows_the_failover(topology, tmp_path):
    """The example project's worker, given only the Sentinel ``REDIS_URL``, takes tasks through the
    primary before the kill and through the promoted replica after it, without a restart; so does the
    sending app (kombu's sentinel transport, with ``celery_redis``'s settings), the same one throughout."""
    # What the example project derives from the Sentinel REDIS_URL (database 0): database 1 beside it.
    broker, options = celery_redis(topology.url.removesuffix("/0") + "/1")
    client = Celery(broker=broker, backend=broker, set_as_current=False)
    client.conf.broker_transport_options = client.conf.result_backend_transport_options = options

    def run_sweep() -> dict:
        sent = client.send_task("activity.sweep", queue=settings.CELERY_TASK_DEFAULT_QUEUE)
        return sent.get(timeout=30)

    try:
        with worker("sentinel", tmp_path, REDIS_URL=topology.url, ACTIVITY_REDIS_CLUSTER="0") as proc:
            assert run_sweep()["job"] == "sweep", proc.log.read_text()[-3000:]
            topology.kill_primary()
            wait_until(lambda: topology.master_address() == ("127.0.0.1", topology.replica.port), 30, "the switch")
            assert run_sweep()["job"] == "sweep", proc.log.read_text()[-3000:]
            assert proc.process.poll() is None
    finally:
        client.close()
