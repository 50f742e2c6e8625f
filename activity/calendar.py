"""UTC days, ISO weeks (Monday first) and months, and the names keys give them (``20261123``,
``2026W48``, ``d:20261123``): made in one place, so writers, readers and the rollup agree on an
event's day."""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, time, timedelta

from activity import clock

DAY_SECONDS = 86400
EPOCH = date(1970, 1, 1)
PERIODS = ("day", "week", "month")  # the periods dated keys are kept for, in this order
# Names are made for a few current days many times a second (every tracked event's keys): each is
# formatted once per process, not once per event.
NAMES_CACHED = 256


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def day_of(ts: float) -> date:
    return utc(ts).date()


def today() -> date:
    return day_of(clock.now())


def midnight(day: date) -> datetime:
    return datetime.combine(day, time(), UTC)


def day_number(day: date) -> int:
    """Days since 1970-01-01."""
    return (day - EPOCH).days


@functools.lru_cache(maxsize=NAMES_CACHED)
def day_name(day: date) -> str:
    """A day as per-day keys name it: ``YYYYMMDD``."""
    return day.strftime("%Y%m%d")


@functools.lru_cache(maxsize=NAMES_CACHED)
def week_name(day: date) -> str:
    """The ISO week of ``day`` as per-week keys name it: ``YYYYWww``."""
    year, week, _ = day.isocalendar()
    return f"{year}W{week:02d}"


@functools.lru_cache(maxsize=NAMES_CACHED)
def month_name(day: date) -> str:
    """The month of ``day`` as per-month keys name it: ``YYYYMM``."""
    return day.strftime("%Y%m")


def last_day(period: str, day: date) -> date:
    """The last day of the ``week`` (ISO, Sunday) or ``month`` holding ``day``."""
    if period == "week":
        return day + timedelta(days=6 - day.weekday())
    if period == "month":
        following = (day.replace(day=28) + timedelta(days=4)).replace(day=1)
        return following - timedelta(days=1)
    raise ValueError(f"period must be week or month, not {period!r}")


def parse_period(period: str, name: str) -> date:
    """The first day of the week (``YYYYWww``) or month (``YYYYMM``) a key names; ValueError if none."""
    if period == "week":
        return datetime.strptime(f"{name}-1", "%GW%V-%u").date()
    if period == "month":
        return datetime.strptime(name, "%Y%m").date()
    raise ValueError(f"period must be week or month, not {period!r}")


def name_of(period: str, day: date) -> str:
    """The ``day``, ``week`` or ``month`` holding ``day``, as the keys of that period name it."""
    return {"day": day_name, "week": week_name, "month": month_name}[period](day)


@functools.lru_cache(maxsize=NAMES_CACHED)
def period_name(period: str, day: date) -> str:
    """The ``day`` or ``week`` holding ``day``, as page-view statistics name it (``d:`` / ``w:``)."""
    if period not in ("day", "week"):
        raise ValueError(f"period must be day or week, not {period!r}")
    return f"{period[0]}:{name_of(period, day)}"


def week_days(day: date) -> list[date]:
    """Monday of ``day``'s ISO week up to ``day``."""
    return [day - timedelta(days=n) for n in range(day.weekday(), -1, -1)]


def seconds_left(day: date, keep_days: int, now: float) -> int:
    """Seconds a key of ``day`` kept ``keep_days`` days past its end still has at ``now`` (<= 0: gone)."""
    return int(midnight(day).timestamp() + (keep_days + 1) * DAY_SECONDS - now)
