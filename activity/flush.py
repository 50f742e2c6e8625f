"""Redis -> database hand-over and Redis upkeep, as services for the scheduled jobs.

``flush`` streams the changed members to the database in bounded batches: claim (atomic move from
"dirty" to "claimed"), one bulk upsert that never moves ``last_seen`` backwards, commit, then
acknowledge. A worker killed anywhere in between leaves its claim behind; the reaper hands it back
and the next run writes it again, which is harmless because the upsert keeps the greater value.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from activity import clock, conf, jobs
from activity.models import UserActivity
from activity.store import flush as flush_store
from activity.store.client import get_client

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FlushResult:
    flushed: int
    batches: int
    reaped: int
    remaining: int  # changes still waiting when the run stopped (its time budget ran out)


@dataclass(frozen=True, slots=True)
class SweepResult:
    scanned: int
    long_lived: int
    repaired: int
    deleted: int


@dataclass(frozen=True, slots=True)
class FlushStatus:
    backlog: int  # members whose latest change has not been acknowledged as written
    claimed: int  # of which claimed by a running (or dead, until reaped) flush
    lag: float  # seconds since the oldest unflushed change (0 when nothing waits)

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def _upsert_sql(rows: int) -> str:
    """One INSERT ... ON CONFLICT per batch whose update keeps the greater ``last_seen``."""
    quote = connection.ops.quote_name
    table = quote(UserActivity._meta.db_table)
    greatest = "MAX" if connection.vendor == "sqlite" else "GREATEST"
    values = ", ".join(["(%s, %s, %s, %s, %s)"] * rows)
    return (
        f"INSERT INTO {table} ({quote('user_id')}, {quote('account_id')}, {quote('first_seen')}, "
        f"{quote('last_seen')}, {quote('updated_at')}) VALUES {values} "
        f"ON CONFLICT ({quote('user_id')}) DO UPDATE SET "
        f"{quote('last_seen')} = {greatest}({table}.{quote('last_seen')}, EXCLUDED.{quote('last_seen')}), "
        f"{quote('account_id')} = COALESCE(EXCLUDED.{quote('account_id')}, {table}.{quote('account_id')}), "
        f"{quote('updated_at')} = EXCLUDED.{quote('updated_at')}"
    )


def _accounts(user_ids: Sequence[str]) -> dict[str, int]:
    """Map the ids that are pks of existing Django users to that pk: one query per batch."""
    pk_field = get_user_model()._meta.pk
    candidates = {}
    for user_id in user_ids:
        try:
            candidates[user_id] = pk_field.to_python(user_id)
        except (ValidationError, ValueError, TypeError):
            continue
    if not candidates:
        return {}
    existing = set(get_user_model().objects.filter(pk__in=candidates.values()).values_list("pk", flat=True))
    return {user_id: pk for user_id, pk in candidates.items() if pk in existing}


def upsert_last_seen(rows: Sequence[tuple[str, float]]) -> None:
    """Write (user id, last-seen epoch seconds) pairs in one statement, never moving a row back.

    ``bulk_create(update_conflicts=True)`` can only overwrite, so a late or repeated flush could
    move ``last_seen`` back; PostgreSQL's GREATEST and SQLite's two-argument MAX keep the later one.
    """
    if not rows:
        return
    accounts = _accounts([user_id for user_id, _ in rows])
    adapt = connection.ops.adapt_datetimefield_value
    now = adapt(dt.datetime.fromtimestamp(clock.now(), dt.UTC))
    params: list[object] = []
    for user_id, ts in rows:
        seen = adapt(dt.datetime.fromtimestamp(ts, dt.UTC))
        params += [user_id, accounts.get(user_id), seen, seen, now]
    with connection.cursor() as cursor:
        cursor.execute(_upsert_sql(len(rows)), params)


def _test_pause(batch: int) -> None:
    """Test-only: sleep after claiming the configured batch so a test can SIGKILL the worker there."""
    if batch == conf.settings.TEST_PAUSE_AFTER_CLAIM:
        log.warning("test pause after claiming batch %d", batch)
        time.sleep(3600)


def reap_stale_claims() -> int:
    """Hand back claims older than a job's lock TTL: their flush has died or been killed by then."""
    return flush_store.reap(get_client(), clock.now() - jobs.lock_ttl(), conf.settings.FLUSH_BATCH)


def flush(batch_size: int | None = None, budget: float | None = None) -> FlushResult:
    """Write every unflushed change to the database, ``batch_size`` members per transaction.

    Memory is bounded by one batch whatever the backlog. The run stops taking new batches after
    ``budget`` seconds (default: half a job's lock TTL) so it ends well inside its lock; the next
    run carries on. Call it under ``jobs.exclusive("flush")`` (the task does).
    """
    batch_size = batch_size or conf.settings.FLUSH_BATCH
    budget = jobs.lock_ttl() / 2 if budget is None else budget
    deadline = time.monotonic() + budget
    client = get_client()
    reaped = reap_stale_claims()
    flushed = batches = 0
    while True:
        claim_time, rows = flush_store.claim(client, clock.now(), batch_size)
        if not rows:
            break
        batches += 1
        _test_pause(batches)
        with transaction.atomic():
            upsert_last_seen(rows)
        flush_store.ack(client, claim_time, [user_id for user_id, _ in rows])
        flushed += len(rows)
        if time.monotonic() >= deadline:
            break
    remaining = flush_store.backlog(client)
    log.info("flush: %d members in %d batches, %d reaped, %d waiting", flushed, batches, reaped, remaining.dirty)
    return FlushResult(flushed=flushed, batches=batches, reaped=reaped, remaining=remaining.dirty)


def status() -> FlushStatus:
    """Backlog size and flush lag, for ``/healthz`` and monitoring. One Redis round trip.

    Lag counts from the first unflushed change of a waiting member and from the claim time of a
    claimed one (a claim is at most one batch old unless its flush died, when the reaper resets it).
    """
    backlog = flush_store.backlog(get_client())
    lag = 0.0 if backlog.oldest is None else max(0.0, clock.now() - backlog.oldest)
    return FlushStatus(backlog=backlog.dirty + backlog.claimed, claimed=backlog.claimed, lag=round(lag, 3))


def prune(retention: float | None = None, step: int = 1000) -> tuple[int, int]:
    """Drop last-seen members older than the retention from Redis; the database keeps them.

    A member whose change is not yet in the database (dirty or claimed) is kept. Returns
    (removed, kept-because-unflushed).
    """
    retention = conf.settings.LAST_SEEN_RETENTION if retention is None else retention
    return flush_store.prune(get_client(), clock.now() - retention, step)


def sweep(count: int = 200) -> SweepResult:
    """SCAN the service's prefix ``count`` keys per step; give a TTL to (or delete) keys without one.

    Only keys under ``ACTIVITY_KEY_PREFIX`` are looked at; the documented long-lived keys are left
    alone. Each repaired key is logged by name, so a stray is easy to trace to its writer.
    """
    scanned = long_lived = repaired = deleted = 0
    for step in flush_store.sweep(get_client(), count, conf.settings.SWEEP_DEFAULT_TTL):
        scanned += step.scanned
        long_lived += step.long_lived
        repaired += len(step.repaired)
        deleted += len(step.deleted)
        if step.repaired or step.deleted:
            log.warning("sweep: keys without a TTL: repaired %s, deleted %s", step.repaired[:5], step.deleted[:5])
    return SweepResult(scanned=scanned, long_lived=long_lived, repaired=repaired, deleted=deleted)
