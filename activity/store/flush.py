"""The flush queue (docs/flush.md): a member is in ``dirty`` or ``claimed`` from its change until a
committed flush acknowledges it, so a worker killed anywhere loses nothing (``reap`` hands dead runs'
claims back). An erased user is never claimed, nor acknowledged if claimed before the erase: both are
reported, so the flush deletes the row it may have written. Each last-seen partition has its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from activity.store.client import Client
from activity.store.last_seen import by_partition, partitions
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
    rows: list[tuple[str, float]]  # (user id, last seen), oldest change first within each partition
    erased: list[str]  # popped but tombstoned: not claimed; their database rows must go


class Ack(NamedTuple):
    removed: int  # members acknowledged (removed from ``claimed``)
    erased: list[str]  # members erased since their claim: still claimed until ``forget``


class FlushQueue:
    """The ``dirty`` and ``claimed`` sorted sets beside each last-seen partition."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def claim(self, now: float, limit: int) -> Claim:
        """Claim changed members with their last seen, oldest change first: up to ``limit`` divided
        by the partitions (rounded up) from each, so an empty claim means nothing waits anywhere."""
        claim_time = repr(float(now))
        parts = partitions()
        share = -(-limit // len(parts))
        pipe = self.client.pipeline(transaction=False)
        for part in parts:
            pipe.script(CLAIM, [part.seen, part.dirty, part.claimed, part.tombstones], [claim_time, share])
        replies = pipe.execute()
        rows = [(flat[i], float(flat[i + 1])) for flat, _ in replies for i in range(0, len(flat), 2)]
        return Claim(claim_time, rows, [member for _, erased in replies for member in erased])

    def ack(self, claim_time: str, members: list[str], now: float) -> Ack:
        """Remove members whose database write committed, if they still carry ``claim_time`` (a
        member reaped and claimed again by a later run is that run's to acknowledge); members
        erased since are kept and reported."""
        if not members:
            return Ack(0, [])
        parts = partitions()
        pipe = self.client.pipeline(transaction=False)
        for i, users in by_partition(members).items():
            pipe.script(ACK, [parts[i].claimed, parts[i].tombstones], [claim_time, repr(float(now)), *users])
        replies = pipe.execute()
        return Ack(sum(removed for removed, _ in replies), [member for _, erased in replies for member in erased])

    def forget(self, members: list[str]) -> None:
        """Drop the claims of erased members once their database rows are gone (never claimed
        again while tombstoned, so no other run's claim can be among them)."""
        if not members:
            return
        parts = partitions()
        pipe = self.client.pipeline(transaction=False)
        for i, users in by_partition(members).items():
            pipe.zrem(parts[i].claimed, *users)
        pipe.execute()

    def reap(self, older_than: float, step: int) -> int:
        """Hand claims made at or before ``older_than`` back to ``dirty``, ``step`` per call: one
        round trip calling every partition, then another for those that had more."""
        total = 0
        pending = list(partitions())
        while pending:
            pipe = self.client.pipeline(transaction=False)
            for part in pending:
                pipe.script(REAP, [part.claimed, part.dirty], [repr(float(older_than)), step])
            replies = pipe.execute()
            total += sum(replies)
            pending = [part for part, moved in zip(pending, replies, strict=True) if moved == step]
        return total

    def backlog(self) -> Backlog:
        """Sizes of ``dirty`` and ``claimed`` and the oldest score in either; one round trip."""
        parts = partitions()
        pipe = self.client.pipeline(transaction=False)
        for part in parts:
            pipe.zcard(part.dirty)
            pipe.zcard(part.claimed)
            pipe.zrange(part.dirty, 0, 0, withscores=True)
            pipe.zrange(part.claimed, 0, 0, withscores=True)
        replies = pipe.execute()
        dirty = sum(replies[0::4])
        claimed = sum(replies[1::4])
        scores = [rows[0][1] for rows in replies[2::4] + replies[3::4] if rows]
        return Backlog(dirty=dirty, claimed=claimed, oldest=min(scores) if scores else None)
