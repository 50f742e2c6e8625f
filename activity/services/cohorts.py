"""Retention tables (docs/cohorts.md): of the signed-in users first active (or signed up) in a day or
ISO week of the site's calendar, how many were active in each period after. Cells whose period is
still in Redis are counted from the bitmaps; older ones come from the ``RetentionCell`` rows the
daily rollup wrote while they were. A table is a cached copy (``services.cached``) under the
reports' policy: one build per expiry, whoever reads it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from activity import calendar, clock
from activity.errors import ActivityError, InvalidValue
from activity.models import RetentionCell
from activity.services import cached
from activity.services.reports import Policy
from activity.store import cohorts as store
from activity.store import people
from activity.store.client import get_client
from activity.store.lifetimes import KEEP_DAYS, day_ttl

BY = ("first_seen", "signup")
COHORT_PERIODS = ("day", "week")
MAX_PERIODS = {"day": 90, "week": 26}  # cohorts and periods per table, at most
# How far back a late event can move a user's first day: its day must still be in the active
# bitmaps' retention, and the day it replaces was at most today (plus the future skew).
MOVE_WINDOW = KEEP_DAYS + 2


class UnknownGroup(ActivityError, LookupError):
    """No Django auth group has this id."""


@dataclass(frozen=True, slots=True)
class Query:
    by: str = "first_seen"
    period: str = "day"
    cohorts: int = 7
    periods: int = 7
    group: int | None = None

    def check(self) -> None:
        """``InvalidValue`` naming the field (``field: reason``) for anything out of bounds."""
        if self.by not in BY:
            raise InvalidValue(f"by: must be one of {', '.join(BY)}.")
        if self.period not in COHORT_PERIODS:
            raise InvalidValue(f"period: must be one of {', '.join(COHORT_PERIODS)}.")
        bound = MAX_PERIODS[self.period]
        for name in ("cohorts", "periods"):
            if not 1 <= getattr(self, name) <= bound:
                raise InvalidValue(f"{name}: must be between 1 and {bound} when period is {self.period}.")


def shifted(period: str, start: date, k: int) -> date:
    """The first day of the period ``k`` periods after the one starting at ``start``."""
    return start + timedelta(days=k if period == "day" else 7 * k)


def in_redis(period: str, start: date, now: float) -> bool:
    """Whether the period's active-user bitmap is still kept (its last day within retention)."""
    last = start if period == "day" else calendar.last_day("week", start)
    return day_ttl(last, now) > 0


def _days_of(period: str, start: date) -> list[date]:
    return [start] if period == "day" else [start + timedelta(days=n) for n in range(7)]


def _first_seen_cohort(period: str, start: date, periods: Sequence[tuple[str, date]]) -> store.Cohort:
    """Users first active in the period at ``start``, less those a late event moved to a day before it."""
    moved = [start - timedelta(days=n) for n in range(MOVE_WINDOW, 0, -1)]
    return store.Cohort(first_days=_days_of(period, start), moved_days=moved, periods=periods)


def signups(period: str, starts: Sequence[date]) -> dict[date, list[int]]:
    """The dense ids of the users who signed up (``date_joined``, local) in each period, by start,
    assigned to those who have none yet (a signup never seen active is in its cohort all the same);
    erased users still tombstoned are left out."""
    if not starts:
        return {}
    first, last = min(starts), shifted(period, max(starts), 1)
    rows = get_user_model()._default_manager.filter(
        date_joined__gte=calendar.midnight(first), date_joined__lt=calendar.midnight(last)
    )
    wanted, by_user = set(starts), {}
    for pk, joined in rows.values_list("pk", "date_joined").iterator(chunk_size=10_000):
        start = calendar.start_of(period, calendar.day_of(joined.timestamp()))
        if start in wanted:
            by_user[str(pk)] = start
    found = defaultdict(list)
    for user, dense in people.assign(get_client(), list(by_user), clock.now()).items():
        found[by_user[user]].append(dense)
    return found


def _cohorts(by: str, period: str, wanted: Sequence[tuple[date, Sequence[date]]]) -> list[store.Cohort]:
    """The store's cohorts for (start, periods to count) pairs."""
    ids = signups(period, [start for start, _ in wanted]) if by == "signup" else {}
    found = []
    for start, counted in wanted:
        periods = [(period, day) for day in counted]
        if by == "signup":
            found.append(store.Cohort(ids=ids.get(start, []), periods=periods))
        else:
            found.append(_first_seen_cohort(period, start, periods))
    return found


def build(query: Query, now: float) -> dict[str, Any]:
    """The table as the API answers it, counted now (no cache). A cell whose period left Redis comes
    from the rollup's rows; a group's such cell, which the rollup does not keep, is null."""
    period = query.period
    current = calendar.start_of(period, calendar.day_of(now))
    starts = [shifted(period, current, n - query.cohorts + 1) for n in range(query.cohorts)]
    reached = {start: min(query.periods, _between(period, start, current) + 1) for start in starts}
    live = {
        start: [
            shifted(period, start, k) for k in range(reached[start]) if in_redis(period, shifted(period, start, k), now)
        ]
        for start in starts
    }
    counted = store.count(get_client(), _cohorts(query.by, period, list(live.items())), query.group)
    stored = {}
    if query.group is None and any(len(live[start]) < reached[start] for start in starts):
        rows = RetentionCell.objects.filter(by=query.by, period=period, cohort__in=starts)
        stored = {(row.cohort, row.offset): row.retained for row in rows}
    cohorts = []
    for start, found in zip(starts, counted, strict=True):
        by_day = dict(zip(live[start], found.retained, strict=True))
        retained = [by_day.get(shifted(period, start, k), stored.get((start, k))) for k in range(reached[start])]
        cohorts.append({"start": start.isoformat(), "size": found.size, "retained": retained})
    return {"by": query.by, "period": period, "time_zone": calendar.zone_name(), "cohorts": cohorts}


def _between(period: str, first: date, last: date) -> int:
    days = (last - first).days
    return days if period == "day" else days // 7


# --- the cached copy ---------------------------------------------------------------------------


def table_id(query: Query, now: float) -> str:
    """The copy's id: the query and the current period, so a new day or week starts a new copy."""
    current = calendar.name_of(query.period, calendar.day_of(now))
    group = "all" if query.group is None else str(query.group)
    return f"{query.by}:{query.period}:{query.cohorts}:{query.periods}:{group}:{current}"


@dataclass(frozen=True, slots=True)
class Table:
    body: dict[str, Any]
    fresh: bool


def _copy(query: Query, now: float, policy: Policy) -> cached.Copy[Table]:
    ident = table_id(query, now)

    def read() -> Table | None:
        found = store.read_table(get_client(), ident)
        return None if found is None else Table(found.body, found.pttl_ms > policy.stale_ms)

    def rebuild() -> None:
        store.write_table(get_client(), ident, build(query, now), policy.ttl_ms + policy.stale_ms)

    return cached.Copy(
        lock=f"retention:{ident}",
        wait_s=policy.wait_s,
        stale_ms=policy.stale_ms,
        read=read,
        is_fresh=lambda found: found.fresh,
        pttl_ms=lambda: store.table_pttl_ms(get_client(), ident),
        build=rebuild,
    )


def table(query: Query) -> tuple[dict[str, Any], str]:
    """The table and how it was served (``hit``, ``stale`` or ``miss``, as reports are).
    Raises ``InvalidValue`` for a query out of bounds, ``UnknownGroup``."""
    query.check()
    if query.group is not None and not Group.objects.filter(pk=query.group).exists():
        raise UnknownGroup(query.group)
    found, how = cached.serve(_copy(query, clock.now(), Policy.current()))
    return found.body, how


def drop_tables() -> int:
    """Drop every cached table, so the next read builds one from the data as it is now: for a job
    that wrote past activity (``activity_demo``), which changes cohorts no table's TTL foresaw.
    Returns how many were dropped."""
    return store.drop_tables(get_client())


# --- the rollup's cells --------------------------------------------------------------------------


def _cells_of(by: str, period: str, start: date, now: float) -> list[RetentionCell]:
    """The cells of every cohort of the last ``MAX_PERIODS`` up to the period at ``start``, counted
    in that period."""
    bound = MAX_PERIODS[period]
    wanted = [(shifted(period, start, -k), [start]) for k in range(bound)]
    counted = store.count(get_client(), _cohorts(by, period, wanted))
    zone = calendar.zone_name()
    return [
        RetentionCell(
            by=by,
            period=period,
            cohort=cohort,
            offset=_between(period, cohort, start),
            size=found.size,
            retained=found.retained[0],
            time_zone=zone,
            updated_at=timezone.now(),
        )
        for (cohort, _), found in zip(wanted, counted, strict=True)
    ]


def periods_to_keep(day: date, now: float) -> list[tuple[str, date]]:
    """(period, start) whose cells the rollup of ``day`` writes: the day itself, the day leaving the
    bitmaps' retention next, and the weeks either ends; only those still in Redis."""
    found: list[tuple[str, date]] = []
    for last in (day, calendar.day_of(now) - timedelta(days=KEEP_DAYS)):
        found.append(("day", last))
        if last.weekday() == 6:
            found.append(("week", calendar.start_of("week", last)))
    return [(period, start) for period, start in dict.fromkeys(found) if in_redis(period, start, now)]


def keep_cells(day: date, now: float) -> int:
    """Write the cells of ``periods_to_keep(day)`` for both cohort kinds; returns how many. Run by
    the rollup (behind its lock); reruns overwrite with the current counts. A period without an
    active-user bitmap (nobody active, or a period from before the upgrade to dense ids, whose
    bitmap is no longer read) writes none, so an upgrade never overwrites a stored count with 0."""
    cells: list[RetentionCell] = []
    wanted = periods_to_keep(day, now)
    for (period, start), exists in zip(wanted, store.have_active(get_client(), wanted), strict=True):
        if not exists:
            continue
        for by in BY:
            cells += _cells_of(by, period, start, now)
    RetentionCell.objects.bulk_create(
        cells,
        batch_size=500,
        update_conflicts=True,
        unique_fields=["by", "period", "cohort", "offset"],
        update_fields=["size", "retained", "time_zone", "updated_at"],
    )
    return len(cells)


# --- the backfill ------------------------------------------------------------------------------


def seed_first_days(firsts: Iterable[tuple[str, float]]) -> int:
    """Record each (user id, epoch seconds of an activity) as the user's first active day where it
    is earlier than the one known: ``activity_backfill``'s step. Returns how many first days were
    new or moved back."""
    earliest: dict[str, date] = {}
    for user, ts in firsts:
        day = calendar.day_of(ts)
        if user not in earliest or day < earliest[user]:
            earliest[user] = day
    return store.seed_first_days(get_client(), earliest, clock.now()) if earliest else 0
