"""Idempotency records of ingest calls (an ``Idempotency-Key`` of a caller, a task id), and the fence
that makes a batch's page views count once however often it is sent.

A record is one hash per (caller, key), tagged ``{pv}`` like the page-view keys. ``begin`` (one
script) claims it for an attempt's random token with a short lease, or says what it holds: the kept
answer, another body's digest (a conflict), or a claim whose lease lasts (still running). The batch
is then sent as usual, in one pipeline that on a Cluster spans several nodes; its page-view scripts,
all in the ``{pv}`` slot, run behind ``lua/fence.lua``: one writes only while the token is the
record's writer, or while there is none and the token holds the claim, when it makes the token the
writer in the same step as its own writes. A writer is never replaced and a lost claim never comes
back, so an attempt's scripts all write or none does, in any order (a script re-run after NOSCRIPT
included). Last seen and the audience figures need no fence: writing them again changes nothing.
``finish`` keeps the answer while the token still holds the claim.

So a batch whose reply was lost (a 503 after a timeout) is either not written or written with its
writer recorded: the retry, once the lease has passed, takes the claim over, and its page-view
scripts find a writer and write nothing; the first attempt's scripts, arriving late, find the claim
taken and write nothing. Exactly one attempt's page views count, in every order.
"""

from __future__ import annotations

from dataclasses import dataclass

from activity.store import keys
from activity.store.client import Client
from activity.store.scripts import LuaScript

BEGIN = LuaScript("idempotency_begin")
FINISH = LuaScript("idempotency_finish")


@dataclass(frozen=True, slots=True)
class Fence:
    """An attempt's hold on a record: the record's key and the attempt's token."""

    record: str
    token: str


def fence_part(fence: Fence | None) -> tuple[list[str], list[str]]:
    """The key and argument ``lua/fence.lua`` takes before each page-view script's own. Unguarded
    (None), the tombstones' key of the slot stands in, never read."""
    return ([fence.record], [fence.token]) if fence else ([keys.tombstones("pv")], [""])


def begin(
    client: Client, digest: str, body: str, token: str, now: float, lease: float, ttl: int
) -> tuple[list[str], Fence]:
    """Claim record ``digest`` for ``token``, or what it holds (``lua/idempotency_begin.lua``):
    ``["claimed"]``, ``["conflict"]``, ``["answered", status, body]`` or ``["running", seconds]``;
    with the attempt's fence."""
    fence = Fence(keys.idempotency(digest), token)
    return list(BEGIN(client, [fence.record], [body, token, repr(now), repr(lease), ttl])), fence


def finish(client: Client, fence: Fence, status: int, body: str, ttl: int) -> list[str] | None:
    """Keep this attempt's answer: ``["kept", status, body]``, or ``["answered", status, body]`` for
    one kept before; None when another attempt has taken the claim over."""
    held = FINISH(client, [fence.record], [fence.token, status, body, ttl])
    return None if held is None else list(held)
