"""The hand-over of last seen from Redis to the database (docs/flush.md): claim a batch, upsert it,
commit, acknowledge. A run killed anywhere leaves claims the reaper hands back, and writing a row
twice is harmless (the upsert keeps the greater value); a user erased meanwhile cannot come back
through a flush, which deletes any row it wrote for them (docs/privacy.md)."""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass

from django.db import transaction
from django.dispatch import Signal

from activity import clock, metrics
from activity.managers import Upsert
from activity.models import UserActivity
from activity.services import locks
from activity.store.client import get_client
from activity.store.flush import Ack, FlushQueue

BATCH = 2000  # members per database transaction

log = logging.getLogger(__name__)

# Sent on the flushing thread once a batch is claimed, before it is written, with ``batch`` (from 1)
# and ``size``: for progress, and for the tests that kill a worker holding a claim.
batch_claimed = Signal()


@dataclass(frozen=True, slots=True)
class FlushResult:
    flushed: int
    batches: int
    reaped: int
    remaining: int  # changes still waiting when the run stopped (its time budget ran out)


@dataclass(frozen=True, slots=True)
class FlushStatus:
    backlog: int  # members whose latest change has not been acknowledged as written
    claimed: int  # of which claimed by a running (or dead, until reaped) flush
    lag: float  # seconds since the oldest unflushed change (0 when nothing waits)

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class _Batch:
    claim_time: str
    user_ids: list[str]
    upsert: Upsert | None
    erased: list[str]  # tombstoned members popped with the batch: their rows are deleted


def _claim(queue: FlushQueue, batch_size: int) -> _Batch | None:
    """Claim the next batch and build its upsert; None when nothing waits."""
    claim = queue.claim(clock.now(), batch_size)
    if not claim.rows and not claim.erased:
        return None
    user_ids = [user_id for user_id, _ in claim.rows]
    upsert = UserActivity.objects.build_upsert(claim.rows) if claim.rows else None
    return _Batch(claim.claim_time, user_ids, upsert, claim.erased)


def _delete_rows(user_ids: list[str]) -> None:
    if user_ids:
        UserActivity.objects.filter(user_id__in=user_ids).delete()


def _settle(queue: FlushQueue, acked: Ack) -> None:
    """Members erased after their claim: delete the rows just written, then drop their claims."""
    if acked.erased:
        _delete_rows(acked.erased)
        queue.forget(acked.erased)


def reap_stale_claims(age: float | None = None) -> int:
    """Hand back claims older than ``age`` seconds, by default the flush lock's TTL: the flush task's
    hard time limit ends a run before then, so such a claim's run is over, and a live run's claims
    are never taken. ``age=0`` hands back every claim: for an interrupted run holding the flush lock."""
    age = locks.job_ttl("flush") if age is None else age
    return FlushQueue(get_client()).reap(clock.now() - age, BATCH)


def flush(batch_size: int | None = None, budget: float | None = None) -> FlushResult:
    """Write every unflushed change to the database, ``batch_size`` members a transaction; call it
    under ``locks.exclusive_job("flush")``. A helper thread acknowledges batch N-1 and claims N+1
    while the database writes N, so a run takes about the database's time and holds two batches at
    most. It stops taking batches after ``budget`` seconds (half the flush lock's TTL), inside its lock."""
    batch_size = batch_size or BATCH
    budget = locks.job_ttl("flush") / 2 if budget is None else budget
    deadline = time.monotonic() + budget
    queue = FlushQueue(get_client())
    reaped = reap_stale_claims()
    flushed = batches = 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="flush-redis") as redis_side:
        claiming: Future[_Batch | None] | None = redis_side.submit(_claim, queue, batch_size)
        acking: Future[Ack] | None = None
        while claiming is not None and (batch := claiming.result()) is not None:
            batches += 1
            batch_claimed.send(sender=flush, batch=batches, size=len(batch.user_ids))
            claiming = redis_side.submit(_claim, queue, batch_size) if time.monotonic() < deadline else None
            with transaction.atomic():
                if batch.upsert is not None:
                    batch.upsert.execute()
                _delete_rows(batch.erased)
            metrics.FLUSH_ROWS.inc(len(batch.user_ids))
            if acking is not None:
                _settle(queue, acking.result())  # also surfaces a failed ack before queueing the next
            acking = redis_side.submit(queue.ack, batch.claim_time, batch.user_ids, clock.now())
            flushed += len(batch.user_ids)
        if acking is not None:
            _settle(queue, acking.result())
    remaining = queue.backlog()
    log.info("flush: %d members in %d batches, %d reaped, %d waiting", flushed, batches, reaped, remaining.dirty)
    return FlushResult(flushed=flushed, batches=batches, reaped=reaped, remaining=remaining.dirty)


def status() -> FlushStatus:
    """Backlog and lag, for ``/healthz`` and monitoring; one round trip. Lag counts from a waiting
    member's first unflushed change, or a claimed one's claim time."""
    backlog = FlushQueue(get_client()).backlog()
    lag = 0.0 if backlog.oldest is None else max(0.0, clock.now() - backlog.oldest)
    return FlushStatus(backlog=backlog.dirty + backlog.claimed, claimed=backlog.claimed, lag=round(lag, 3))
