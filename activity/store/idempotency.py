"""Idempotency records of ingest calls (an ``Idempotency-Key`` of a caller, a task id), and the fence
that makes a batch's page views count once however often it is sent.

A record is one hash per (caller, key). ``begin`` (one script) claims it for an attempt's random
token with a short lease, or says what it holds: the kept answer, another body's digest (a
conflict), or a claim whose lease lasts (still running). The batch is then sent as usual, in one
pipeline that on a Cluster spans several nodes; its page-view scripts run behind ``lua/fence.lua``,
which keeps one writer per slot: the first attempt to run a page-view script in a slot becomes that
slot's writer in the same step as the script's writes, and no other attempt's script writes there.
Every attempt of a record sends the same batch (another body is a conflict), so each slot's part of
it is written by exactly one attempt, in any order (a script re-run after NOSCRIPT included), however
the attempts' scripts interleave across slots. Last seen and the audience figures need no fence:
writing them again changes nothing. ``finish`` keeps the answer while the token still holds the claim.

So a batch whose reply was lost (a 503 after a timeout) is written in none, some or all of its
slots: the retry, once the lease has passed, takes the claim over and writes the slots no attempt
wrote; the first attempt's scripts, arriving late, write only in a slot no attempt has written yet.
Exactly one attempt's page views count in each slot, in every order.
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
    """An attempt's hold on a record: the record's digest, the attempt's token and how long the
    record, and so each slot's writer, is kept."""

    digest: str
    token: str
    ttl: int

    @property
    def record(self) -> str:
        return keys.idempotency(self.digest)


def fence_part(fence: Fence | None, tag: str) -> tuple[list[str], list[str]]:
    """The key and arguments ``lua/fence.lua`` takes before the own of a page-view script of the
    ``{tag}`` slot. Unguarded (None), the slot's tombstones' key stands in, untouched."""
    if fence is None:
        return [keys.tombstones(tag)], ["", "1"]
    return [keys.batch_writer(tag, fence.digest)], [fence.token, str(fence.ttl)]


def begin(
    client: Client, digest: str, body: str, token: str, now: float, lease: float, ttl: int
) -> tuple[list[str], Fence]:
    """Claim record ``digest`` for ``token``, or what it holds (``lua/idempotency_begin.lua``):
    ``["claimed"]``, ``["conflict"]``, ``["answered", status, body]`` or ``["running", seconds]``;
    with the attempt's fence."""
    fence = Fence(digest, token, ttl)
    return list(BEGIN(client, [fence.record], [body, token, repr(now), repr(lease), ttl])), fence


def finish(client: Client, fence: Fence, status: int, body: str, ttl: int) -> list[str] | None:
    """Keep this attempt's answer: ``["kept", status, body]``, or ``["answered", status, body]`` for
    one kept before; None when another attempt has taken the claim over."""
    held = FINISH(client, [fence.record], [fence.token, status, body, ttl])
    return None if held is None else list(held)
