"""The chaos run's retrying clients (``bench.chaos``, fault ``redis-stall-retries``): Redis stalled
mid-ingest, first by ``DEBUG SLEEP``, then by ``CLIENT PAUSE WRITE``, while clients retry every 503
and 409 until their batch is answered 202, some with an ``Idempotency-Key``, some without.

A request that times out is answered 503, yet a stalled Redis may still run it once awake. Each
event is a page view of a user of its own, so the page views the service counts for that user (its
navigation session, read through the service) say how often its batch was written: once with a key,
whatever the retries; as often as Redis ran it without one. Both kinds run side by side through the
same stalls, so the contrast is measured in the same run.
"""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from bench import harness
from bench.slow_clients import HOST

STALL_S = 1.0  # each stall: past the API's Redis timeout (ACTIVITY_REDIS_TIMEOUT, 0.5 s)
STALLS_EACH = 6  # stalls of each kind, GAP seconds apart: each catches the batches then in flight
GAP = 0.5
BATCH = 5  # page views per batch, each of a user of its own
THREADS = 3  # of each kind (with a key, without)
RETRY_503 = 0.2  # seconds before a retry after a 503 or no answer (the 503's Retry-After says 5)
RETRY_409_MAX = 3.0  # a 409's Retry-After (the first attempt's lease), capped
GIVE_UP = 30.0  # seconds a batch is retried at most; a batch never answered 202 is reported
PATH = "/chaos/retried"

_users = itertools.count()


def counted(users: list[str]) -> dict[str, int]:
    """The probe's side: page views the service counts for each user (its navigation session)."""
    from activity.services import sessions

    found = {user: sessions.page(user, 1, 1) for user in users}
    return {user: page.count if page else 0 for user, page in found.items()}


@dataclass
class Batch:
    users: tuple[str, ...]
    answers: list[int | None] = field(default_factory=list)  # each attempt's status; None: no answer

    @property
    def acknowledged(self) -> bool:
        return bool(self.answers) and self.answers[-1] == 202


@dataclass
class Retriers:
    """``THREADS`` threads sending batches with a key and as many without, each retrying its batch
    until a 202; ``stop()`` lets every batch under way finish."""

    port: int
    token: str
    sent: dict[bool, list[Batch]] = field(default_factory=lambda: {True: [], False: []})
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Retriers:
        for keyed in [True] * THREADS + [False] * THREADS:
            thread = threading.Thread(target=self._loop, args=(keyed,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> dict[bool, list[Batch]]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=GIVE_UP + 10)
        return self.sent

    def _loop(self, keyed: bool) -> None:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=5)
        while not self._stop.is_set():
            one = Batch(tuple(f"retried-{next(_users)}" for _ in range(BATCH)))
            ts = round(time.time(), 3)
            body = json.dumps({"events": [{"user": user, "ts": ts, "path": PATH} for user in one.users]})
            headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json"}
            if keyed:
                headers["Idempotency-Key"] = uuid.uuid4().hex
            deadline = time.monotonic() + GIVE_UP
            while not one.acknowledged and time.monotonic() < deadline:
                status, retry_after = self._post(connection, body, headers)
                one.answers.append(status)
                if status is None:
                    connection.close()
                    connection = http.client.HTTPConnection(HOST, self.port, timeout=5)
                if status != 202:
                    time.sleep(min(float(retry_after), RETRY_409_MAX) if status == 409 else RETRY_503)
            self.sent[keyed].append(one)
        connection.close()

    @staticmethod
    def _post(connection: http.client.HTTPConnection, body: str, headers: dict[str, str]) -> tuple[int | None, str]:
        try:
            connection.request("POST", "/api/v1/events/", body=body, headers=headers)
            answer = connection.getresponse()
            answer.read()
            return answer.status, answer.getheader("Retry-After") or "0"
        except (OSError, http.client.HTTPException):
            return None, "0"


def sleep_server(url: str) -> None:
    with redis.Redis.from_url(url) as raw:
        raw.execute_command("DEBUG", "SLEEP", STALL_S)


def pause_writes(url: str) -> None:
    with redis.Redis.from_url(url) as raw:
        raw.execute_command("CLIENT", "PAUSE", int(STALL_S * 1000), "WRITE")
    time.sleep(STALL_S)


STALLS: dict[str, Callable[[str], None]] = {"DEBUG SLEEP": sleep_server, "CLIENT PAUSE WRITE": pause_writes}


def figures(sent: list[Batch], counts: dict[str, int]) -> dict[str, int]:
    """What one kind of client saw and what the service counted for its page views."""
    answers = Counter(status for one in sent for status in one.answers)
    acknowledged = [user for one in sent if one.acknowledged for user in one.users]
    return {
        "batches": len(sent),
        "answered_503": answers[503],
        "answered_409": answers[409],
        "no_answer": answers[None],
        "retries": sum(len(one.answers) - 1 for one in sent),
        "never_acknowledged": sum(not one.acknowledged for one in sent),
        "page_views_acknowledged": len(acknowledged),
        "page_views_counted": sum(counts[user] for user in acknowledged),
        "counted_twice": sum(counts[user] > 1 for user in acknowledged),
        "not_counted": sum(counts[user] == 0 for user in acknowledged),
    }


def stall_with_retries(url: str, port: int, token: str, ask: Callable[..., Any]) -> dict[str, dict[str, Any]]:
    """Each stall in turn under fresh retrying clients; once every batch is answered, the counts read
    back through the service (``ask``: the chaos probe). Figures by stall, then by key or none."""
    results: dict[str, dict[str, Any]] = {}
    for name, stall in STALLS.items():
        clients = Retriers(port, token).start()
        for _ in range(STALLS_EACH):
            time.sleep(GAP)
            stall(url)
        sent = clients.stop()
        users = [user for kind in sent.values() for one in kind for user in one.users]
        counts = ask("counted", users=users)
        results[name] = {"key": figures(sent[True], counts), "no key": figures(sent[False], counts)}
    return results


def table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The retries' own table, in Markdown, with what it shows."""
    head = [
        "stall",
        "client",
        "batches",
        "503s / 409s / no answer",
        "retries",
        "page views acknowledged",
        "page views counted",
        "counted twice",
    ]
    rows = [head]
    for stall, kinds in results.items():
        for kind, f in kinds.items():
            client = "retries with its `Idempotency-Key`" if kind == "key" else "retries without a key"
            row = [
                f"{stall}, {STALLS_EACH} x {STALL_S:g} s",
                client,
                f"{f['batches']:,}",
                f"{f['answered_503']:,} / {f['answered_409']:,} / {f['no_answer']:,}",
                f"{f['retries']:,}",
                f"{f['page_views_acknowledged']:,}",
                f"{f['page_views_counted']:,}",
                f"{f['counted_twice']:,}" if kind == "no key" else f"**{f['counted_twice']:,}**",
            ]
            rows.append(row)
    notes = (
        f"Retries (fault `redis-stall-retries`): {THREADS} clients with an `Idempotency-Key` (a new one per "
        f"batch) and {THREADS} without send batches of {BATCH} page views, each of a user of its own, beside the "
        f"phase's load; each retries its batch after every 503 or unanswered request ({RETRY_503:g} s later) and "
        f"every 409 (after its `Retry-After`, at most {RETRY_409_MAX:g} s) until it is answered 202. Redis is "
        f"stalled {STALLS_EACH} times {STALL_S:g} s by `DEBUG SLEEP`, {GAP:g} s apart, then, under fresh clients, "
        "as often by `CLIENT PAUSE WRITE`: each stall catches the batches then under way. Counted: the page "
        "views of each acknowledged batch's users, read back through the service (their navigation sessions) "
        "once every batch was answered; counted twice: page views counted more than once. `DEBUG SLEEP` "
        "leaves each request that timed out in Redis's socket buffer and runs it once awake: without a key, "
        "a batch among those counts again when it is retried."
    )
    return harness.markdown(rows) + "\n\n" + notes
