"""The chaos run's load (``bench.chaos``): threads POSTing event batches and asking for signed-in
pages, each request noted with its canaries (``Sent``) for the phase's reconciliation. Apart from
the rig and the faults: the same load runs through every phase."""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.slow_clients import HOST

PAGE = "/admin/login/"  # a signed-in member's 200 text/html page (the admin's form, not its index)
API_BATCH = 5  # events per POST
INTERVAL = 0.02  # seconds between one thread's requests
THREADS = 2  # of each kind


@dataclass
class Sent:
    """One request of the load: its canaries, when it went and came back, and its answer."""

    kind: str  # "api" or "page"
    canaries: tuple[str, ...]
    ts: float  # the events' ts (API), or when the page was asked for
    answered: float = 0.0
    status: int | None = None  # None: no answer (the connection failed or timed out)

    @property
    def acknowledged(self) -> bool:
        return self.status == (202 if self.kind == "api" else 200)


_canary = itertools.count()


@dataclass
class Load:
    """``THREADS`` threads POSTing event batches and as many asking for signed-in pages."""

    port: int
    token: str
    pages: deque[tuple[str, str]]
    sent: list[Sent] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Load:
        for target in [self._api] * THREADS + [self._page] * THREADS:
            thread = threading.Thread(target=self._loop, args=(target,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> list[Sent]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)
        return self.sent

    def _loop(self, target: Callable[[http.client.HTTPConnection], Sent | None]) -> None:
        connection = http.client.HTTPConnection(HOST, self.port, timeout=5)
        while not self._stop.is_set():
            one = target(connection)
            if one is None:
                return
            if one.status is None:
                connection.close()
                connection = http.client.HTTPConnection(HOST, self.port, timeout=5)
            self.sent.append(one)
            time.sleep(INTERVAL)
        connection.close()

    def _ask(self, connection: http.client.HTTPConnection, one: Sent, method: str, path: str, **kw: Any) -> Sent:
        try:
            connection.request(method, path, **kw)
            answer = connection.getresponse()
            answer.read()
            one.status = answer.status
        except (OSError, http.client.HTTPException):
            one.status = None
        one.answered = time.time()
        return one

    def _api(self, connection: http.client.HTTPConnection) -> Sent:
        now = round(time.time(), 3)
        one = Sent("api", tuple(f"chaos-{next(_canary)}" for _ in range(API_BATCH)), now)
        body = json.dumps({"events": [{"user": user, "ts": now} for user in one.canaries]})
        headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json"}
        return self._ask(connection, one, "POST", "/api/v1/events/", body=body, headers=headers)

    def _page(self, connection: http.client.HTTPConnection) -> Sent | None:
        try:
            user, session = self.pages.popleft()
        except IndexError:
            return None  # every prepared member has been used: no more pages this run
        one = Sent("page", (user,), time.time())
        return self._ask(connection, one, "GET", PAGE, headers={"Cookie": f"sessionid={session}"})
