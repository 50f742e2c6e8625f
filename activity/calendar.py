"""Days, ISO weeks (Monday first) and months of the site's time zone (``ACTIVITY_TIME_ZONE``, by
default Django's ``TIME_ZONE``), each cut at that zone's local midnight, and the names keys give
them (``20261123``, ``2026W48``, ``d:20261123``): made in one place, so writers, readers and the
rollup agree on an event's day. A local day lasts 23, 24 or 25 hours (or 23.5 and 24.5 in
Australia/Lord_Howe), so its edges are always asked of the zone, never counted in 86,400 seconds."""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.core.signals import setting_changed

from activity import clock, conf

# Seconds in 24 hours: for lifetimes counted from a write, never for a day's edges.
DAY_SECONDS = 86400
EPOCH = date(1970, 1, 1)
PERIODS = ("day", "week", "month")  # the periods dated keys are kept for, in this order
# Names are made for a few current days many times a second (every tracked event's keys): each is
# formatted once per process, not once per event.
NAMES_CACHED = 256


def zone() -> ZoneInfo:
    """The site's calendar zone (``ACTIVITY_TIME_ZONE``, else Django's ``TIME_ZONE``)."""
    return conf.settings.TIME_ZONE


def zone_name() -> str:
    """The calendar zone's IANA name, as the rollup rows and the dashboard state it."""
    return str(zone().key)


def utc(ts: float) -> datetime:
    """``ts`` as an aware UTC datetime: for instants shown or stored, not for days."""
    return datetime.fromtimestamp(ts, UTC)


# The local day the last lookup found, as (start, end, day), start and end in epoch seconds: while
# events fall in it, which is nearly always, an event's day is two comparisons, not a zone lookup.
_NO_DAY = (0.0, 0.0, EPOCH)
_current = _NO_DAY


def day_of(ts: float) -> date:
    """The local date holding the instant ``ts``."""
    start, end, day = _current
    if start <= ts < end:
        return day
    return _look_up(ts)


def _look_up(ts: float) -> date:
    global _current
    day = datetime.fromtimestamp(ts, zone()).date()
    start, end = midnight(day).timestamp(), midnight(day + timedelta(days=1)).timestamp()
    if start <= ts < end:  # not so only where a clock change skips past a midnight's first instant
        _current = (start, end, day)
    return day


def _forget(*, setting: str, **kwargs: Any) -> None:
    """A changed zone makes the remembered day's edges wrong (``override_settings`` in tests)."""
    global _current
    if setting in ("ACTIVITY_TIME_ZONE", "TIME_ZONE"):
        _current = _NO_DAY


setting_changed.connect(_forget)


def today() -> date:
    return day_of(clock.now())


def midnight(day: date) -> datetime:
    """The first instant of the local ``day``: its midnight, or, where a clock change skips
    midnight, the change itself (``fold=0`` reads a skipped time with the offset before it)."""
    return datetime.combine(day, time(), zone())


def day_number(day: date) -> int:
    """Days from 1970-01-01 to the local date ``day``."""
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


def start_of(period: str, day: date) -> date:
    """The first day of the ``day``, ISO ``week`` (Monday) or ``month`` holding ``day``."""
    if period == "day":
        return day
    if period == "week":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


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
    """Seconds a key of ``day`` kept ``keep_days`` local days past its end still has at ``now``
    (<= 0: gone): until the local midnight ending them, whatever their lengths."""
    return int(midnight(day + timedelta(days=keep_days + 1)).timestamp() - now)
