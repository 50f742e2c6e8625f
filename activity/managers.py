"""The SQL that writes flushed last seen: one statement per batch, never moving a row back. Built by
hand, on the model's manager, so the flush (``activity.services.flush``) deals only in batches."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection, models

from activity import clock


def _upsert_sql(db_table: str, rows: int) -> str:
    """One INSERT ... SELECT ... ON CONFLICT a batch, keeping the greater ``last_seen``. On PostgreSQL
    the batch is three comma-joined strings, as the driver formats typed arrays element by element
    (docs/flush.md); the LEFT JOIN fills the account in the same statement; ``WHERE true`` lets SQLite
    tell the upsert's ON from the join's."""
    quote = connection.ops.quote_name
    table = quote(db_table)
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


def account_candidates(user_ids: Sequence[str]) -> list[object | None]:
    """Each id as the Django user pk it spells (``str(pk) == id``, within the column), else None:
    the middleware records ``str(user.pk)``, so "007" is not user 7. Integer keys skip
    ``run_validators``, which cost more than the rest of a batch's Python and slowed the flush."""
    pk_field = get_user_model()._meta.pk
    if isinstance(pk_field, models.IntegerField):
        low, high = connection.ops.integer_field_range(pk_field.get_internal_type())
        # Django 4.2's SQLite backend states no range (5.x does); its integers are 64-bit either way.
        low = -(2**63) if low is None else low
        high = 2**63 - 1 if high is None else high

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
            return pk_field.get_db_prep_value(value, connection) if str(value) == user_id else None

    return [candidate(user_id) for user_id in user_ids]


def _joined(values: Sequence[str]) -> str:
    """``values`` joined for ``string_to_array``. Ids, numbers and pks parsed from ids never hold a
    comma; checked anyway, as one would shift every later value into the wrong row."""
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


def _build_upsert(db_table: str, rows: Sequence[tuple[str, float]]) -> Upsert:
    """The upsert of (user id, last-seen epoch seconds) pairs; ``rows`` must not be empty. Not
    ``bulk_create(update_conflicts=True)``: it can only overwrite, so a late or repeated flush
    could move ``last_seen`` back."""
    adapt = connection.ops.adapt_datetimefield_value
    user_ids = [user_id for user_id, _ in rows]
    candidates = account_candidates(user_ids)
    now = adapt(dt.datetime.fromtimestamp(clock.now(), dt.UTC))
    if connection.vendor == "postgresql":
        seen_texts = [repr(ts) for _, ts in rows]  # repr: the shortest text that reads back as the same float
        candidate_texts = ["" if candidate is None else str(candidate) for candidate in candidates]
        params: list[object] = [_joined(user_ids), _joined(seen_texts), _joined(candidate_texts)]
    else:
        seen = [adapt(dt.datetime.fromtimestamp(ts, dt.UTC)) for _, ts in rows]
        params = [value for row in zip(user_ids, seen, candidates, strict=True) for value in row]
    return Upsert(sql=_upsert_sql(db_table, len(rows)), params=[*params, now])


class UserActivityManager(models.Manager):
    def build_upsert(self, rows: Sequence[tuple[str, float]]) -> Upsert:
        """The statement writing ``rows``, built now and run later (the flush overlaps the two)."""
        return _build_upsert(self.model._meta.db_table, rows)
