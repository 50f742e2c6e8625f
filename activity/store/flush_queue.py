"""The flush queue: users whose last seen changed and has not reached the database yet.

A reliable queue in the RPOPLPUSH / LMOVE tradition, shaped like rq's ``StartedJobRegistry``:
``zadd_unless_smaller`` marks a changed member in ``dirty`` (score: time of its first unflushed
change) in the same step as the change; a flush ``claim``s a batch, moving it atomically into
``claimed`` (score: claim time), writes it to the database, then ``ack``s it. A member is in
``dirty`` or ``claimed`` from its change until a committed flush acknowledged it, so a worker
killed anywhere loses nothing: ``reap`` hands claims older than any live flush back to ``dirty``.

An erased user (tombstoned in ``{ls}``, see ``activity.store.erase``) is never claimed, and one
claimed before the erase is not acknowledged: both are reported, so the flush deletes the row it
may have written, and a flush killed before doing so leaves the claim to the reaper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from activity.store import keys
from activity.store.client import Client
from activity.store.scripts import LuaScript

CLAIM = LuaScript("flush_claim")
ACK = LuaScript("flush_ack")
REAP = LuaScript("flush_reap")


@dataclass(frozen=True, slots=True)
class Backlog:
    dirty: int
    claimed: int
    oldest: float | None  # dirty: time of the first unflushed change; claimed: claim time


class Claim(NamedTuple):
    claim_time: str  # as sent to the script; ``ack`` needs the same string
    rows: list[tuple[str, float]]  # (user id, last seen), oldest change first
    erased: list[str]  # popped but tombstoned: not claimed; their database rows must go


class Ack(NamedTuple):
    removed: int  # members acknowledged (removed from ``claimed``)
    erased: list[str]  # members erased since their claim: still claimed until ``forget``


class FlushQueue:
    """The ``dirty`` and ``claimed`` sorted sets beside last seen (one hash tag, one slot)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def claim(self, now: float, limit: int) -> Claim:
        """Claim up to ``limit`` changed members, oldest change first, with their last seen."""
        claim_time = repr(float(now))
        script_keys = [keys.last_seen(), keys.last_seen_dirty(), keys.last_seen_claimed(), keys.tombstones("ls")]
        flat, erased = CLAIM(self.client, script_keys, [claim_time, limit])
        return Claim(claim_time, [(flat[i], float(flat[i + 1])) for i in range(0, len(flat), 2)], erased)

    def ack(self, claim_time: str, members: list[str], now: float) -> Ack:
        """Remove members whose database write committed, if they still carry ``claim_time`` (a
        member reaped and claimed again by a later run is that run's to acknowledge); members
        erased since are kept and reported."""
        if not members:
            return Ack(0, [])
        removed, erased = ACK(
            self.client, [keys.last_seen_claimed(), keys.tombstones("ls")], [claim_time, repr(float(now)), *members]
        )
        return Ack(removed, erased)

    def forget(self, members: list[str]) -> None:
        """Drop the claims of erased members once their database rows are gone (never claimed
        again while tombstoned, so no other run's claim can be among them)."""
        if members:
            self.client.zrem(keys.last_seen_claimed(), *members)

    def reap(self, older_than: float, step: int) -> int:
        """Hand claims made at or before ``older_than`` back to ``dirty``, ``step`` per call."""
        total = 0
        while True:
            moved = REAP(
                self.client, [keys.last_seen_claimed(), keys.last_seen_dirty()], [repr(float(older_than)), step]
            )
            total += moved
            if moved < step:
                return total

    def backlog(self) -> Backlog:
        """Sizes of ``dirty`` and ``claimed`` and the oldest score in either; one round trip."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(keys.last_seen_dirty())
        pipe.zcard(keys.last_seen_claimed())
        pipe.zrange(keys.last_seen_dirty(), 0, 0, withscores=True)
        pipe.zrange(keys.last_seen_claimed(), 0, 0, withscores=True)
        dirty, claimed, oldest_dirty, oldest_claimed = pipe.execute()
        scores = [rows[0][1] for rows in (oldest_dirty, oldest_claimed) if rows]
        return Backlog(dirty=dirty, claimed=claimed, oldest=min(scores) if scores else None)
