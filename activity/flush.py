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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass

import redis
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection, models, transaction

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
    """One INSERT ... SELECT ... ON CONFLICT per batch whose update keeps the greater ``last_seen``.

    The batch is the relation ``batch(user_id, seen, candidate)``. On PostgreSQL it travels as three
    comma-joined strings that ``string_to_array`` splits (see ``_joined``), the times as epoch
    floats that ``to_timestamp`` converts: as typed arrays, which the driver formats element by
    element, a 2,000-row batch took 55 ms instead of 32 (measured side by side). Elsewhere it is a
    VALUES list.
    ``candidate`` is the id as a Django user pk where it parses as one; the LEFT JOIN keeps it only
    if that user exists, so the account is filled in the same statement. ``WHERE true`` lets
    SQLite tell the upsert's ON from a join's.
    """
    quote = connection.ops.quote_name
    table = quote(UserActivity._meta.db_table)
    user = get_user_model()._meta
    pk = quote(user.pk.column)
    if connection.vendor == "postgresql":
        pk_type = user.pk.cast_db_type(connection)
        arrays = (
            f"string_to_array(%s, ','), string_to_array(%s, ',')::float8[], string_to_array(%s, ',', '')::{pk_type}[]"
        )
        batch = f"SELECT u, to_timestamp(s), c FROM unnest({arrays}) AS v(u, s, c)"
        greatest = "GREATEST"
    else:
        batch = "VALUES " + ", ".join(["(%s, %s, %s)"] * rows)
        greatest = "MAX"
    return (
        f"WITH batch (user_id, seen, candidate) AS ({batch}) "
        f"INSERT INTO {table} ({quote('user_id')}, {quote('account_id')}, {quote('first_seen')}, "
        f"{quote('last_seen')}, {quote('updated_at')}) "
        f"SELECT batch.user_id, account.{pk}, batch.seen, batch.seen, %s "
        f"FROM batch LEFT JOIN {quote(user.db_table)} account ON account.{pk} = batch.candidate WHERE true "
        f"ON CONFLICT ({quote('user_id')}) DO UPDATE SET "
        f"{quote('last_seen')} = {greatest}({table}.{quote('last_seen')}, EXCLUDED.{quote('last_seen')}), "
        f"{quote('account_id')} = COALESCE(EXCLUDED.{quote('account_id')}, {table}.{quote('account_id')}), "
        f"{quote('updated_at')} = EXCLUDED.{quote('updated_at')}"
    )


def _account_candidates(user_ids: Sequence[str]) -> list[object | None]:
    """Each id as the Django user pk it spells (``str(pk) == id``, within the column), else None.

    "007" is not user 7: the middleware records ``str(user.pk)``, so only that spelling is a user.
    Integer keys, the common case, skip ``run_validators``: it cost more than the rest of a batch's
    Python, which runs beside the database's write and slowed it (about 12% fewer rows/s).
    """
    pk_field = get_user_model()._meta.pk
    if isinstance(pk_field, models.IntegerField):
        low, high = connection.ops.integer_field_range(pk_field.get_internal_type())

        def candidate(user_id: str) -> object | None:
            try:
                value = int(user_id)
            except ValueError:
                return None
            return value if str(value) == user_id and low <= value <= high else None

    else:

        def candidate(user_id: str) -> object | None:
            try:
                value = pk_field.to_python(user_id)
                pk_field.run_validators(value)
            except (ValidationError, ValueError, TypeError):
                return None
            return value if str(value) == user_id else None

    return [candidate(user_id) for user_id in user_ids]


def _joined(values: Sequence[str]) -> str:
    """``values`` joined for ``string_to_array(..., ',')``. User ids never hold a comma (they match
    ``events.USER_ID_RE``), nor do numbers or the pk values parsed from such ids; checked anyway."""
    text = ",".join(values)
    if text.count(",") != len(values) - 1:
        raise ValueError(f"a flushed value holds a comma: {[value for value in values if ',' in value][:3]}")
    return text


@dataclass(frozen=True, slots=True)
class Upsert:
    """One batch's statement and parameters, built apart from running it: a flush builds the next
    batch's while the database is busy writing this one."""

    sql: str
    params: list[object]

    def execute(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(self.sql, self.params)


def build_upsert(rows: Sequence[tuple[str, float]]) -> Upsert:
    """The greater-of upsert of (user id, last-seen epoch seconds) pairs; ``rows`` must not be empty.

    ``bulk_create(update_conflicts=True)`` can only overwrite, so a late or repeated flush could
    move ``last_seen`` back; PostgreSQL's GREATEST and SQLite's two-argument MAX keep the later one.
    """
    adapt = connection.ops.adapt_datetimefield_value
    user_ids = [user_id for user_id, _ in rows]
    candidates = _account_candidates(user_ids)
    now = adapt(dt.datetime.fromtimestamp(clock.now(), dt.UTC))
    if connection.vendor == "postgresql":
        seen_texts = [repr(ts) for _, ts in rows]  # repr: the shortest text that reads back as the same float
        candidate_texts = ["" if candidate is None else str(candidate) for candidate in candidates]
        params: list[object] = [_joined(user_ids), _joined(seen_texts), _joined(candidate_texts)]
    else:
        seen = [adapt(dt.datetime.fromtimestamp(ts, dt.UTC)) for _, ts in rows]
        params = [value for row in zip(user_ids, seen, candidates, strict=True) for value in row]
    return Upsert(sql=_upsert_sql(len(rows)), params=[*params, now])


def upsert_last_seen(rows: Sequence[tuple[str, float]]) -> None:
    """Write (user id, last-seen epoch seconds) pairs in one statement, never moving a row back."""
    if rows:
        build_upsert(rows).execute()


@dataclass(frozen=True, slots=True)
class _Claimed:
    claim_time: str
    user_ids: list[str]
    upsert: Upsert


def _claim(client: redis.Redis, batch_size: int) -> _Claimed | None:
    """Claim the next batch and build its upsert; None when nothing waits."""
    claim_time, rows = flush_store.claim(client, clock.now(), batch_size)
    if not rows:
        return None
    return _Claimed(claim_time=claim_time, user_ids=[user_id for user_id, _ in rows], upsert=build_upsert(rows))


def _test_pause(batch: int) -> None:
    """Test-only: sleep after claiming the configured batch so a test can SIGKILL the worker there."""
    if batch == conf.settings.TEST_PAUSE_AFTER_CLAIM:
        log.warning("test pause after claiming batch %d", batch)
        time.sleep(conf.settings.TEST_PAUSE_SECONDS)


def reap_stale_claims() -> int:
    """Hand back claims older than a job's lock TTL: their flush has died or been killed by then."""
    return flush_store.reap(get_client(), clock.now() - jobs.lock_ttl(), conf.settings.FLUSH_BATCH)


def flush(batch_size: int | None = None, budget: float | None = None) -> FlushResult:
    """Write every unflushed change to the database, ``batch_size`` members per transaction.

    The Redis side runs one step ahead on a helper thread: while the database writes batch N, the
    thread acknowledges batch N-1 and claims and builds batch N+1, so the run costs about the
    database's time rather than the sum of both. Memory is bounded by two batches whatever the
    backlog; a run killed anywhere leaves at most two claims, which the reaper hands back. The
    run stops taking new batches after ``budget`` seconds (default: half a job's lock TTL) so it
    ends well inside its lock; the next run carries on. Call it under ``jobs.exclusive("flush")``.
    """
    batch_size = batch_size or conf.settings.FLUSH_BATCH
    budget = jobs.lock_ttl() / 2 if budget is None else budget
    deadline = time.monotonic() + budget
    client = get_client()
    reaped = reap_stale_claims()
    flushed = batches = 0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="flush-redis") as redis_side:
        claiming: Future[_Claimed | None] | None = redis_side.submit(_claim, client, batch_size)
        acking: Future[int] | None = None
        while claiming is not None and (batch := claiming.result()) is not None:
            batches += 1
            _test_pause(batches)
            claiming = redis_side.submit(_claim, client, batch_size) if time.monotonic() < deadline else None
            with transaction.atomic():
                batch.upsert.execute()
            if acking is not None:
                acking.result()  # surfaces a failed ack before queueing the next
            acking = redis_side.submit(flush_store.ack, client, batch.claim_time, batch.user_ids)
            flushed += len(batch.user_ids)
        if acking is not None:
            acking.result()
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
