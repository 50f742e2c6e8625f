"""Erase and export one user everywhere, Redis and the database (docs/privacy.md); every entry point
(the API, ``activity_erase``, the admin action, a deleted Django user) calls these. Where a user's
data can be is worked out from the settings and the calendar, never found by SCAN, so an erase costs
a bounded number of commands; its tombstones keep late events and a racing flush from bringing the
user back."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from celery import current_app
from django.contrib.auth import get_user_model
from django.db import transaction

from activity import calendar, clock, conf
from activity.errors import StoreUnavailable
from activity.events import iso
from activity.managers import account_candidates
from activity.models import UserActivity
from activity.services import funnels, groups, locks, rate_limits, reports
from activity.store import audience as audience_store
from activity.store import cohorts as cohort_store
from activity.store import funnels as funnel_store
from activity.store import last_seen as last_seen_store
from activity.store import people as people_store
from activity.store import privacy as store
from activity.store.client import get_client
from activity.store.lifetimes import COHORT_KEEP_DAYS, KEEP_DAYS

TOMBSTONE_TTL = 3600  # seconds an erased id stays tombstoned: the flush and late events skip it

logger = logging.getLogger("activity.services.privacy")


@dataclass(frozen=True, slots=True)
class Erasure:
    user: str
    traces: int  # Redis keys deleted, members removed and bits cleared
    rows: int  # database rows deleted
    groups: int  # group views dropped (rebuilt without the user's activity at the next read)


def tombstone_ttl() -> int:
    """Seconds an erased id stays tombstoned: an hour, but never less than a dead flush's claim takes
    to come back (reaped past a job lock's TTL, then claimed by the next run)."""
    return max(TOMBSTONE_TTL, 2 * int(locks.JOB_LOCK_TTL) + int(conf.settings.FLUSH_INTERVAL))


def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def page_periods(now: float) -> list[str]:
    """The periods whose per-user page statistics may still exist at ``now``: a view is recorded at
    most ``PAGE_STATS_DAYS`` back and its keys live that long after a write (a week's 7 more), so a
    day's reach back twice that, a week's 7 days further, and ahead as far as the allowed skew."""
    stats = conf.settings.PAGE_STATS_DAYS
    today, ahead = calendar.day_of(now), calendar.day_of(now + conf.settings.MAX_FUTURE_SKEW)
    days = [calendar.period_name("day", day) for day in _days(today - timedelta(days=2 * stats), ahead)]
    weeks = {calendar.period_name("week", day) for day in _days(today - timedelta(days=2 * stats + 7), ahead)}
    return days + sorted(weeks)


def audience_days(now: float) -> list[date]:
    """The days whose active-user keys may still exist at ``now`` (``KEEP_DAYS`` back, skew ahead)."""
    today, ahead = calendar.day_of(now), calendar.day_of(now + conf.settings.MAX_FUTURE_SKEW)
    return _days(today - timedelta(days=KEEP_DAYS), ahead)


def cohort_days(now: float) -> list[date]:
    """The days whose retention cohort bitmaps may still exist at ``now`` (``COHORT_KEEP_DAYS`` back)."""
    today, ahead = calendar.day_of(now), calendar.day_of(now + conf.settings.MAX_FUTURE_SKEW)
    return _days(today - timedelta(days=COHORT_KEEP_DAYS), ahead)


def _where(user: str, now: float) -> store.Where:
    visitor = audience_store.user_visitor_id(user)
    visitor_hashes, visitor_tombstones = audience_store.visitor_home(visitor, calendar.day_of(now))
    periods = page_periods(now)
    days = audience_days(now)
    day_bitmaps = [(calendar.day_name(day), audience_store.BITS[0](calendar.day_name(day))) for day in days]
    by_period = dict(zip(calendar.PERIODS, audience_store.BITS, strict=True))
    longer = {by_period[period](calendar.name_of(period, day)) for day in days for period in ("week", "month")}
    return store.Where(
        user=user,
        digest=people_store.digest(user),
        visitor_hashes=visitor_hashes,
        visitor_tombstones=visitor_tombstones,
        visitor=visitor,
        page_periods=periods,
        report_copies=reports.copies_of(periods),
        bitmaps=[bitmap for _, bitmap in day_bitmaps] + sorted(longer) + cohort_store.cohort_bitmaps(cohort_days(now)),
        day_bitmaps=day_bitmaps,
        rate_counters=rate_limits.user_counters(user),
        person=funnels.user_person(user),
        progress=funnel_store.person_home(funnels.user_person(user), now),
    )


def account(user: str) -> Any | None:
    """The Django user whose pk this id spells (``str(pk) == user``), or None."""
    candidate = account_candidates([user])[0]
    return None if candidate is None else get_user_model().objects.filter(pk=candidate).first()


def is_known(user: str) -> bool:
    """Whether anything is known of ``user``: a Django user, a database row or a last seen. One
    query or two, and one Redis command at most."""
    if account(user) is not None or UserActivity.objects.filter(user_id=user).exists():
        return True
    return last_seen_store.get(get_client(), user) is not None


def erase(user: str) -> Erasure:
    """Remove ``user`` from Redis and the database and tombstone the id; idempotent, raises
    ``StoreUnavailable`` (retry). Redis goes first (the erase, then the user's group views and any
    build in flight), so the tombstone is in place before the row goes and a racing flush sees it."""
    now = clock.now()
    traces, indexed = store.erase(get_client(), _where(user, now), now, now + tombstone_ttl())
    group_ids = {int(group_id) for group_id in indexed}
    found = account(user)
    if found is not None and hasattr(found, "groups"):
        group_ids.update(found.groups.values_list("pk", flat=True))
    if group_ids:
        groups.drop_views(group_ids, [(group_id, user) for group_id in group_ids])
    rows, _ = UserActivity.objects.filter(user_id=user).delete()
    logger.info("erased user %s: %d traces in Redis, %d rows, %d group views", user, traces, rows, len(group_ids))
    return Erasure(user=user, traces=traces, rows=rows, groups=len(group_ids))


def erase_after_commit(user: str) -> None:
    """Erase ``user`` once the current transaction commits (a deleted Django user); when Redis
    cannot serve then, queue the Celery task, which retries."""

    def run() -> None:
        try:
            erase(user)
        except StoreUnavailable as error:
            logger.warning("erase of %s queued: Redis unavailable (%s)", user, error)
            current_app.send_task("activity.erase_user", args=[user])

    transaction.on_commit(run)


def erase_deleted_user(sender: Any, instance: Any, **kwargs: Any) -> None:
    """``post_delete`` of the user model: erase the user's activity everywhere."""
    erase_after_commit(str(instance.pk))


def _day(number: int | None) -> str | None:
    return None if number is None else (calendar.EPOCH + timedelta(days=number)).isoformat()


def _holds_activity(found: store.Footprint) -> bool:
    """Whether Redis holds any of the user's activity; a tombstone is none (an erased user's id)."""
    return bool(
        found.last_seen is not None
        or found.unflushed_since is not None
        or found.claimed_at is not None
        or found.session
        or found.display_name is not None
        or found.former_names
        or found.page_views
        or found.groups
        or found.dense_id is not None
        or found.active_days
        or found.first_visit_day is not None
        or found.first_active_day is not None
        or found.funnels["latest_view"] is not None
        or found.page_now is not None
        or found.visitors
    )


def export(user: str) -> dict[str, Any] | None:
    """Everything stored about ``user`` (the body of ``GET /api/v1/users/<user>/activity/export/``),
    or None when none of their activity is, as for a user never seen or erased (a Django account
    alone is not activity). One Redis round trip (two once the user has a dense id) and one query."""
    now = clock.now()
    found = store.footprint(get_client(), _where(user, now))
    row = UserActivity.objects.filter(user_id=user).first()
    if row is None and not _holds_activity(found):
        return None
    seen = found.last_seen
    return {
        "user": user,
        "exported_at": iso(now),
        "last_seen": None
        if seen is None
        else {
            "ts": seen,
            "at": iso(seen),
            "online": seen >= now - conf.settings.ONLINE_WINDOW,
            "unflushed_since": found.unflushed_since,
            "claimed_at": found.claimed_at,
        },
        "session": None
        if not found.session
        else {
            "expires_in": found.session_expires_in,
            "pages": [{"path": path, "ts": ts, "at": iso(ts)} for path, ts in found.session],
        },
        "display_name": found.display_name,
        "former_names": found.former_names,
        "page_views": [
            {"period": "day" if period.startswith("d:") else "week", "name": period[2:], "views": views}
            for period, views in found.page_views.items()
        ],
        "groups": [int(group_id) for group_id in found.groups],
        "dense_id": found.dense_id,
        "active_days": [f"{day[:4]}-{day[4:6]}-{day[6:]}" for day in found.active_days],
        "first_visit": _day(found.first_visit_day),
        "first_active": _day(found.first_active_day),
        "funnels": found.funnels,
        "page_now": None
        if found.page_now is None
        else {"path": found.page_now[0], "ts": found.page_now[1], "at": iso(found.page_now[1])},
        "visitors": [{"visitor": visitor, "linked_at": ts, "at": iso(ts)} for visitor, ts in found.visitors],
        "erased_until": iso(found.tombstone) if found.tombstone is not None and found.tombstone > now else None,
        "database": None
        if row is None
        else {
            "user_id": row.user_id,
            "account": None if row.account_id is None else str(row.account_id),
            "first_seen": row.first_seen.isoformat(),
            "last_seen": row.last_seen.isoformat(),
            "updated_at": row.updated_at.isoformat(),
        },
    }
