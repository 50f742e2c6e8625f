"""Idempotent ingest: an ``Idempotency-Key`` (or a task id) makes a retried batch count once, whether
its first attempt was answered, lost to a timeout, or arrives late after a retry took over."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
import redis
from django.test import override_settings

from activity import calendar, clock
from activity.events import Event
from activity.services import idempotency, ingest, sessions
from activity.store import idempotency as idempotency_store
from activity.store import keys, partitioning
from activity.store import sessions as sessions_store
from activity.store.client import get_client
from activity.store.scripts import LUA_DIR, LuaScript
from activity.tasks import record_events as record_events_task
from tests.celery_procs import wait_for, worker
from tests.clients import APIClient
from tests.conftest import with_permissions
from tests.redis_counts import CommandDelta
from tests.redis_probe import RoundTrips

EVENTS = "/api/v1/events/"
T0 = 1_790_000_000.0


def batch(user: str, ts: float, pages: int = 2) -> dict:
    return {"events": [{"user": user, "ts": ts + n / 1000, "path": f"/p{n}"} for n in range(pages)]}


def post(api: APIClient, body: dict, key: str | None = None):
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return api.post(EVENTS, body, format="json", **headers)


def page_views(ts: float) -> int:
    return sessions.page_views(calendar.day_of(ts))


def pages_in_session(user: str) -> int:
    found = sessions.page(user)
    return 0 if found is None else found.count


def own_keys(client) -> set[str]:
    """Our keys but the request counters the throttles keep (they count every request)."""
    return {key for key in client.scan_iter(match=f"{keys.prefix()}*") if f"{keys.prefix()}rate:" not in key}


def page_view_state(client) -> dict[str, bytes]:
    """Every page-view key of its tags and the paths' partitions (the idempotency records and
    writers included) as DUMP gives it. The caller's own activity, recorded after each answered
    request, holds no page view."""
    return {
        key: client.dump(key)
        for tag in (keys.SESSIONS_TAG, keys.PV_TAG, "{paths:")
        for key in client.scan_iter(match=f"{keys.prefix()}{tag}*")
    }


def claim(caller: str, key: str, body: dict, now: float, token: str = "first-attempt") -> idempotency_store.Fence:
    """An attempt's claim as ``idempotency.once`` makes it, without running anything."""
    held, fence = idempotency_store.begin(
        get_client(),
        idempotency.record_name(caller, key),
        idempotency.digest(body),
        token,
        now,
        idempotency.lease_seconds(),
        idempotency.RECORD_TTL,
    )
    assert held == ["claimed"]
    return fence


@pytest.mark.django_db
class TestApi:
    def test_a_repeat_gets_the_first_answer_replayed_and_writes_nothing(self, staff_api, redis_client, at):
        at(T0)
        first = post(staff_api, batch("u1", T0), key="order-1")
        assert first.status_code == 202 and "Idempotent-Replayed" not in first
        assert first.json() == {"accepted": 2, "last_seen_updated": 1}
        before = page_view_state(redis_client)
        again = post(staff_api, batch("u1", T0), key="order-1")
        assert again.status_code == 202 and again["Idempotent-Replayed"] == "true"
        assert again.json() == first.json()
        assert page_view_state(redis_client) == before
        (record,) = [key for key in before if ":idem:" in key]
        assert 0 < redis_client.ttl(record) <= idempotency.RECORD_TTL
        assert redis_client.memory_usage(record, samples=0) <= 400  # 360 on Redis 7.0: a key and an answer
        assert (page_views(T0), pages_in_session("u1")) == (2, 2)

    def test_without_a_key_a_replay_counts_again(self, staff_api, redis_client, at):
        at(T0)
        assert post(staff_api, batch("u1", T0)).status_code == 202
        assert post(staff_api, batch("u1", T0)).status_code == 202
        assert page_views(T0) == 4
        assert not any(":idem:" in key for key in own_keys(redis_client))  # no record without a key

    def test_the_same_key_with_another_body_is_422_and_writes_nothing(self, staff_api, redis_client, at):
        at(T0)
        assert post(staff_api, batch("u1", T0), key="k").status_code == 202
        before = own_keys(redis_client)
        response = post(staff_api, batch("u2", T0), key="k")
        assert response.status_code == 422
        assert "another request body" in response.json()["detail"]
        assert own_keys(redis_client) == before and page_views(T0) == 2

    @pytest.mark.parametrize("key", ["", "x" * 256, "tab\there", "caf\u00e9", "del\x7f"])
    def test_a_bad_key_is_400_naming_the_header_and_writes_nothing(self, staff_api, redis_client, at, key):
        at(T0)
        response = post(staff_api, batch("u1", T0), key=key)
        assert response.status_code == 400
        assert list(response.json()) == ["Idempotency-Key"]
        assert own_keys(redis_client) == set()

    def test_the_longest_key_is_taken(self, staff_api, redis_client, at):
        at(T0)
        assert post(staff_api, batch("u1", T0), key="~" * 255).status_code == 202

    def test_a_bad_batch_with_a_key_is_400_and_claims_nothing(self, staff_api, redis_client, at):
        at(T0)
        assert post(staff_api, {"events": [{"user": "bad id"}]}, key="k").status_code == 400
        assert own_keys(redis_client) == set()
        assert post(staff_api, batch("u1", T0), key="k").status_code == 202  # the key is still free

    def test_keys_are_each_callers_own(self, staff_api, member_api, redis_client, at, member):
        with_permissions(member, "activity.ingest_events")
        at(T0)
        assert post(staff_api, batch("u1", T0), key="same").status_code == 202
        second = post(member_api, batch("u1", T0), key="same")
        assert second.status_code == 202 and "Idempotent-Replayed" not in second
        assert page_views(T0) == 4

    def test_a_repeat_while_the_first_runs_is_409_with_retry_after(self, staff_api, staff, redis_client, at):
        at(T0)
        body = batch("u1", T0)
        inner = {}

        def run(fence):
            inner["response"] = post(staff_api, body, key="slow")  # the client retries meanwhile
            return {"accepted": 2, "last_seen_updated": 0}

        idempotency.once(f"user:{staff.pk}", "slow", body, run)
        assert inner["response"].status_code == 409
        assert 1 <= int(inner["response"]["Retry-After"]) <= idempotency.lease_seconds() + 1
        assert page_views(T0) == 0  # neither wrote: the first's run wrote nothing, the repeat was refused


@pytest.mark.django_db
class TestLateAttempts:
    """The orders a lost reply leads to, each made deterministic: the page views count once."""

    def test_a_first_attempt_that_wrote_but_never_answered_is_not_written_again(self, staff_api, staff, at):
        at(T0)
        body = batch("u1", T0)
        fence = claim(f"user:{staff.pk}", "lost", body, T0)
        ingest.record_events([Event(e["user"], e["ts"], e["path"]) for e in body["events"]], fence=fence)
        assert page_views(T0) == 2  # written; its answer lost (a 503 after a timeout)
        assert post(staff_api, body, key="lost").status_code == 409  # its lease still runs
        at(T0 + idempotency.lease_seconds() + 0.1)
        retried = post(staff_api, body, key="lost")
        assert retried.status_code == 202 and "Idempotent-Replayed" not in retried
        assert (page_views(T0), pages_in_session("u1")) == (2, 2)
        assert post(staff_api, body, key="lost")["Idempotent-Replayed"] == "true"

    def test_a_first_attempt_arriving_after_a_retry_took_over_writes_nothing(self, staff_api, staff, at):
        at(T0)
        body = batch("u1", T0)
        fence = claim(f"user:{staff.pk}", "late", body, T0)  # its batch still on its way
        at(T0 + idempotency.lease_seconds() + 0.1)
        assert post(staff_api, body, key="late").status_code == 202
        late = ingest.record_events([Event(e["user"], e["ts"], e["path"]) for e in body["events"]], fence=fence)
        assert late.sessions_started == 0
        assert (page_views(T0), pages_in_session("u1")) == (2, 2)

    def test_two_attempts_each_first_in_one_slot_count_each_page_view_once(self, redis_client, staff, at):
        """On a Cluster an attempt's slots are written on their nodes in no common order: here the
        retry's viewers and page counts reached the {pv} slot and the paths' partitions first (the
        writer its scripts set there, planted), then the first attempt ran whole, then the retry.
        Each slot keeps its first writer's part, so the sessions are the first attempt's, the counts
        the retry's, each once."""
        at(T0)
        body = batch("u1", T0)
        events = [Event(e["user"], e["ts"], e["path"]) for e in body["events"]]
        first = claim(f"user:{staff.pk}", "split", body, T0)
        at(T0 + idempotency.lease_seconds() + 0.1)
        retry = claim(f"user:{staff.pk}", "split", body, clock.now(), token="retry")
        partitions = {partitioning.partition_of(event.path, sessions_store.PATH_PARTITIONS) for event in events}
        counted = sorted(map(sessions_store.path_tag, partitions))
        for tag in ("pv", *counted):
            redis_client.set(keys.batch_writer(tag, retry.digest), retry.token, ex=retry.ttl)
        assert ingest.record_events(events, fence=first).sessions_started == 1
        assert (page_views(T0), pages_in_session("u1")) == (0, 2)  # fenced out of the counts: none yet
        assert ingest.record_events(events, fence=retry).sessions_started == 0  # fenced out of {ses}
        assert (page_views(T0), pages_in_session("u1"), sessions.started(calendar.day_of(T0))) == (2, 2, 1)
        writers = {tag: redis_client.get(keys.batch_writer(tag, first.digest)) for tag in ("ses", "pv", *counted)}
        assert writers == {"ses": first.token, "pv": retry.token} | dict.fromkeys(counted, retry.token)
        assert all(0 < redis_client.ttl(keys.batch_writer(tag, first.digest)) <= first.ttl for tag in writers)


def test_a_key_costs_two_round_trips_and_no_key_costs_nothing(redis_client, at):
    """The claim and the answer: two round trips besides the batch's one. Without a key the batch
    sends what it sent before (the fence reads nothing), and a replay is the claim's round trip alone."""
    for script in LUA_DIR.glob("*.lua"):
        redis_client.script_load(LuaScript(script.stem).source)
    at(T0)

    def record(user: str, fence=None) -> dict:
        result = ingest.record_events([Event(user, T0, "/a"), Event(user, T0 + 0.001, "/b")], fence=fence)
        return {"accepted": result.accepted}

    with RoundTrips() as plain:
        record("u1")
    with CommandDelta(redis_client) as commands:
        record("u3")
    # The fence's read (lua/fence.lua, an HMGET in each fenced script) is skipped without a key: the
    # two HMGETs left are the group index's (a plain command) and pages now's read of the people's
    # pages (lua/pages_now_record.lua).
    assert commands.calls["hmget"] == 2
    with RoundTrips() as keyed:
        idempotency.once("caller", "k", batch("u2", T0), lambda fence: record("u2", fence))
    with RoundTrips() as replay:
        assert idempotency.once("caller", "k", batch("u2", T0), lambda fence: record("u2", fence)).replayed
    assert (plain.count, keyed.count, replay.count) == (1, 3, 1)
    assert page_views(T0) == 6


def test_the_openapi_document_describes_the_key(client, db):
    operation = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()["paths"][
        "/api/v1/events/"
    ]["post"]
    (key,) = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
    assert key["in"] == "header" and "counts its page views again" in key["description"]
    assert "Idempotent-Replayed" in operation["responses"]["202"]["headers"]
    assert "Retry-After" in operation["responses"]["409"]["headers"]
    assert "422" in operation["responses"]


def test_a_script_reloaded_after_the_others_ran_still_writes_with_them(redis_client):
    """After SCRIPT FLUSH with some scripts loaded again, the batch's first script meets NOSCRIPT and
    runs after the others, reloaded: the attempt's page views are written whole all the same."""
    redis_client.script_flush()
    for script in (sessions_store.PAGE_COUNTS, sessions_store.VIEWER_RECORD):
        redis_client.script_load(script.source)
    now = clock.now()
    body = batch("u1", now)
    events = [Event(e["user"], e["ts"], e["path"]) for e in body["events"]]
    answer = idempotency.once(
        "caller", "k", body, lambda fence: {"n": ingest.record_events(events, fence=fence).accepted}
    )
    assert answer.body == {"n": 2}
    assert (page_views(now), pages_in_session("u1")) == (2, 2)


@pytest.mark.django_db
def test_a_redelivered_task_counts_once(redis_client, at):
    at(T0)
    events = batch("u1", T0)["events"]
    first = record_events_task.apply(args=[events], task_id="task-1", throw=True).get()
    again = record_events_task.apply(args=[events], task_id="task-1", throw=True).get()
    assert first == again == {"accepted": 2, "last_seen_updated": 1}
    assert page_views(T0) == 2
    record_events_task.apply(args=[events], task_id="task-2", throw=True)  # another task: counted
    assert page_views(T0) == 4


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_a_task_delivered_twice_to_a_real_worker_counts_once(redis_client, tmp_path):
    """A redelivery is the same message again: the same task id, run by a worker process."""
    events = batch("u1", clock.now())["events"]
    with worker("idem", tmp_path) as proc:
        wait_for(lambda: " ready." in proc.log.read_text(), 60, "the worker to start")
        for _ in range(2):
            record_events_task.apply_async(args=[events], task_id="delivered")
        ran = "activity.record_events[delivered] succeeded"
        wait_for(lambda: proc.log.read_text().count(ran) == 2, 30, "both deliveries to run")
    assert proc.log.read_text().count("{'accepted': 2, 'last_seen_updated': 1}") == 2  # the first's answer, twice
    assert page_views(clock.now()) == 2


# --- under a stalled Redis ------------------------------------------------------------------------


def pause_writes(url: str, seconds: float) -> None:
    """Pause the server's writes; CLIENT PAUSE answers once the pause holds."""
    redis.Redis.from_url(url).execute_command("CLIENT", "PAUSE", int(seconds * 1000), "WRITE")


def sleep_server(url: str, seconds: float) -> None:
    """Put the server to sleep and return once it sleeps: DEBUG SLEEP answers only when it wakes, so
    it runs on a thread, and a PING that no longer answers shows the sleep holds."""
    threading.Thread(target=lambda: redis.Redis.from_url(url).execute_command("DEBUG", "SLEEP", seconds)).start()
    probe = redis.Redis.from_url(url, socket_timeout=0.05)
    deadline = time.monotonic() + seconds
    with contextlib.suppress(redis.TimeoutError):
        while time.monotonic() < deadline:
            probe.ping()
            time.sleep(0.01)


@pytest.mark.django_db
@pytest.mark.parametrize("stall", [sleep_server, pause_writes], ids=["debug-sleep", "client-pause"])
def test_a_client_retrying_every_503_with_its_key_counts_each_page_view_once(
    stalling_redis, staff, staff_api, monkeypatch, stall
):
    """Redis stalls as each batch is sent (after its key was claimed): the API times out and answers
    503, and Redis runs the batch once awake. The client retries every 503 (and 409) with its key
    until it gets its 202. Each batch's page views count once, though its first attempt was written."""
    stall_s, batches = 0.6, 2
    record = ingest.record_events
    stall_next = [False]

    def stalled_send(*args, **kwargs):
        if stall_next[0]:  # a batch's first send, once the stall holds
            stall_next[0] = False
            stall(stalling_redis.url, stall_s)
        return record(*args, **kwargs)

    monkeypatch.setattr(ingest, "record_events", stalled_send)
    for script in LUA_DIR.glob("*.lua"):  # the stalled EVALSHAs find their scripts, as in production
        get_client().script_load(LuaScript(script.stem).source)
    now, taken_over = clock.now(), []
    with override_settings(ACTIVITY_REDIS_TIMEOUT=0.2):
        for n in range(batches):
            stall_next[0], answers = True, []
            while not answers or answers[-1] != 202:
                answers.append(post(staff_api, batch(f"u{n}", now + n), key=f"batch-{n}").status_code)
                time.sleep({503: 0.1, 409: 0.5}.get(answers[-1], 0))
            assert answers[0] == 503 and set(answers) <= {503, 409, 202}, answers
            record_key = keys.idempotency(idempotency.record_name(f"user:{staff.pk}", f"batch-{n}"))
            writer, answered_by = get_client().hmget(record_key, "writer", "claim")
            taken_over.append(writer != answered_by)  # the 503's attempt wrote the page views, not the 202's
    assert page_views(now) == 2 * batches
    assert [pages_in_session(f"u{n}") for n in range(batches)] == [2] * batches
    if stall is sleep_server:  # the server ran each first attempt once awake: those 503s were written
        assert taken_over == [True] * batches
