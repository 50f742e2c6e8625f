"""One Redis round trip per API request: small commands ride along with the request's own work.

An API request has more to tell Redis than its work: the throttle counts it, and its caller's own
activity is recorded. Sent on their own, each would be a round trip. Instead they are queued as
*riders* while the request is collected (``collecting()``), and whatever the request sends to Redis
first takes them aboard: a pipeline (``client.Pipeline.execute``) queues them after its own
commands, and a single command (``Client.execute_command``) is sent as a pipeline of itself and
them. Each rider gets the replies back; the caller sees only its own. A request that sends nothing
(a validation error, a view that needs no Redis) sends its riders alone at the end
(``send_pending``), still one round trip.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

from redis import Redis


class Rider(Protocol):
    """Commands that travel with another pipeline: ``queue`` adds them (remembering where their
    replies will be), ``arrived`` gets the whole pipeline's replies. ``needs_success``: dropped
    when the request ends answered 4xx/5xx without having sent anything (a caller's activity)."""

    needs_success: bool

    def queue(self, pipe: Any) -> None: ...  # a client.Pipeline (its script() included)

    def arrived(self, replies: list[Any]) -> None: ...


_pending: ContextVar[list[Rider] | None] = ContextVar("activity_riders", default=None)


@contextmanager
def collecting() -> Iterator[None]:
    """Collect riders for the block (one request); any left unsent on exit are dropped."""
    token = _pending.set([])
    try:
        yield
    finally:
        _pending.reset(token)


def ride(rider: Rider, client: Redis) -> None:
    """Queue ``rider`` for the request's next round trip; outside ``collecting()``, send it now."""
    pending = _pending.get()
    if pending is not None:
        pending.append(rider)
        return
    with collecting():
        ride(rider, client)
        _send(client)


def waiting() -> bool:
    return bool(_pending.get())


def board(pipe: Any) -> list[Rider]:
    """Queue every waiting rider onto ``pipe`` (after its own commands); they are no longer waiting."""
    pending = _pending.get()
    if not pending:
        return []
    aboard = list(pending)
    pending.clear()
    for rider in aboard:
        rider.queue(pipe)
    return aboard


def arrive(aboard: list[Rider], replies: list[Any]) -> None:
    for rider in aboard:
        rider.arrived(replies)


def carry(client: Redis, args: tuple[Any, ...], options: dict[str, Any]) -> Any:
    """One command sent together with the waiting riders; its reply."""
    pipe = client.pipeline(transaction=False)
    pipe.execute_command(*args, **options)
    return pipe.execute()[0]


def send_pending(client: Redis, succeeded: bool) -> None:
    """Send the riders nothing took aboard (one round trip; none when no rider waits)."""
    pending = _pending.get()
    if pending:
        pending[:] = [rider for rider in pending if succeeded or not rider.needs_success]
        _send(client)


def _send(client: Redis) -> None:
    """The waiting riders alone: a pipeline of no command of its own takes them aboard."""
    client.pipeline(transaction=False).execute()
