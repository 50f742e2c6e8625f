"""What the dated audience keys share: their retention, and summing replies into a figure.

Audience figures (visitors, active users) are written into the day's, the ISO week's and the
month's keys at once, so a week or month figure is one count and never a union over days, whose
cost would grow with the days and the id space. A key lives ``KEEP_DAYS`` beyond the last day of
its period, longer than a report reads it plus a margin for a late rollup.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import date

from activity.calendar import PERIODS, last_day, name_of, seconds_left
from activity.store.scripts import LuaScript, Pipeline

ADD_TO_PERIODS = LuaScript("add_to_periods")

KEEP_DAYS = 35


def day_ttl(day: date, now: float) -> int:
    """Seconds a key of ``day`` still has to live at ``now``; <= 0 once the day is out of retention."""
    return seconds_left(day, KEEP_DAYS, now)


def period_ttl(period: str, day: date, now: float) -> int:
    """Seconds the key of the ``week`` or ``month`` holding ``day`` still has to live at ``now``."""
    return day_ttl(last_day(period, day), now)


def dated_keys(builders: Sequence[Callable[[str], str]], day: date, now: float) -> list[tuple[str, int]]:
    """The (key, TTL) of the day's, week's and month's key holding ``day``, ``builders`` being the
    three key builders of one figure in that order: a write goes to all three."""
    ttls = (day_ttl(day, now), period_ttl("week", day, now), period_ttl("month", day, now))
    names = (name_of(period, day) for period in PERIODS)
    return [(build(name), ttl) for build, name, ttl in zip(builders, names, ttls, strict=True)]


def queue_add(
    pipe: Pipeline,
    builders: Sequence[Callable[[str], str]],
    day: date,
    now: float,
    kind: str,
    members: Collection[object],
) -> int:
    """Queue the members' addition to one figure's day, week and month keys (``kind``: ``hll``,
    or ``bits`` for bit offsets), their TTLs included: one EVALSHA, whatever the number of members
    (``lua/add_to_periods.lua``)."""
    found = dated_keys(builders, day, now)
    return pipe.script(ADD_TO_PERIODS, [key for key, _ in found], [kind, *(ttl for _, ttl in found), *members])


def live_days(pairs: Iterable[tuple[object, date]], now: float) -> dict[date, int]:
    """The TTL of each day among ``pairs`` still in retention (a batch has one or two days)."""
    ttls = {day: day_ttl(day, now) for day in {day for _, day in pairs}}
    return {day: ttl for day, ttl in ttls.items() if ttl > 0}


def total(results: Sequence[object], indexes: Iterable[int]) -> int:
    """The sum of the integer replies at ``indexes`` (a missing key's None counts as 0)."""
    return sum(int(results[index] or 0) for index in indexes)
