"""How long each family of keys lives: the TTLs writers give and the sweep restores, one
``Lifetime`` per kind. ``store.keys`` declares each family's; ``store.families`` reads them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from activity import calendar, conf
from activity.calendar import DAY_SECONDS
from activity.funnel_rules import MAX_WINDOW


@dataclass(frozen=True, slots=True)
class Lifetime:
    """How long a family's keys live, and so what the sweep restores: ``stray_ttl(fields, now)`` is
    the TTL for a key found without one (0: delete it; None: leave it), given its placeholders' values."""

    kind: str  # "long-lived", "ttl", "dated", "generation", "merged" or "delete"
    stray_ttl: Callable[[Mapping[str, str], float], int | None]
    keep_days: int = 0  # "dated", "generation": days kept past the end of the period the name gives
    generation_days: int = 0  # "generation": days of one generation


# One of the short documented list of keys that live without a TTL: never touched.
LONG_LIVED = Lifetime("long-lived", lambda fields, now: None)
# Every key of the family is written with a TTL; one found without is broken or a leftover.
DELETE = Lifetime("delete", lambda fields, now: 0)


def fixed(seconds: Callable[[], int]) -> Lifetime:
    """Every write gives the key ``seconds()`` (read at sweep time, so settings apply)."""
    return Lifetime("ttl", lambda fields, now: seconds())


# The dated audience keys (``activity.store.audience``) live this many days beyond the last day of
# their period: longer than a report reads them, plus a margin for a late rollup.
KEEP_DAYS = 35


def day_ttl(day: date, now: float) -> int:
    """Seconds a key of ``day`` still has to live at ``now``; <= 0 once the day is out of retention."""
    return calendar.seconds_left(day, KEEP_DAYS, now)


# The longest a writer gives a key of each dated kind: a day's, a week's or a month's retention.
LONGEST_DAYS = {"day": KEEP_DAYS + 1, "week": KEEP_DAYS + 7, "month": KEEP_DAYS + 31}


def _dated_retention(fields: Mapping[str, str], now: float) -> int:
    """As ``activity.store.audience`` writes it: until the period's last day ends + ``KEEP_DAYS``.
    Past that the key is deleted (no writer renews it); a name without a readable period gets the
    longest TTL a writer gives."""
    period = next(name for name in calendar.PERIODS if name in fields)
    try:
        if period == "day":
            last = datetime.strptime(fields["day"], "%Y%m%d").date()
        else:
            last = calendar.last_day(period, calendar.parse_period(period, fields[period]))
    except ValueError:
        return LONGEST_DAYS[period] * DAY_SECONDS
    return max(day_ttl(last, now), 0)


DATED = Lifetime("dated", _dated_retention, KEEP_DAYS)


def page_stats_ttl(stats_days: int, weekly: bool = False) -> int:
    """Seconds a page statistic of a day (``weekly``: of a week, and display names) lives after the
    write that gives it its TTL; also what the sweep gives one found without."""
    return (stats_days + (7 if weekly else 0)) * DAY_SECONDS


def page_stats(weekly: bool = False) -> Lifetime:
    return fixed(lambda: page_stats_ttl(conf.settings.PAGE_STATS_DAYS, weekly))


def views_hash_ttl(stats_days: int) -> int:
    """Seconds a user's views hash lives after their first view of a day: renewed once a day, not
    at every view (one command less a view), it lives a local day (25 h at most, with a DST change)
    longer than the week's statistics, so it outlives every period it counts."""
    return page_stats_ttl(stats_days, weekly=True) + 25 * 3600


def views_hash() -> Lifetime:
    return fixed(lambda: views_hash_ttl(conf.settings.PAGE_STATS_DAYS))


@dataclass(frozen=True, slots=True)
class Generations:
    """People's entries kept without a TTL each: an entry lives in its hash of the generation (a run
    of ``days`` days) of its latest write, and the hash lives until ``keep_days`` past the
    generation's last day. So an entry is forgotten between ``keep_days`` and ``keep_days + days``
    days after its latest write, and the hashes alive at once are few and fixed in number: a script
    names them all, never a key per person."""

    days: int
    keep_days: int

    def of(self, day: date) -> int:
        """The generation holding ``day``: its day number (days since 1970-01-01) // ``days``."""
        return calendar.day_number(day) // self.days

    def live(self, day: date) -> list[int]:
        """The generations whose hashes may still exist on ``day``, the newest (``day``'s) first."""
        oldest = (calendar.day_number(day) - self.keep_days) // self.days
        return list(range(self.of(day), oldest - 1, -1))

    def ttl(self, generation: int, now: float) -> int:
        """Seconds the hashes of ``generation`` still have to live at ``now``; <= 0 once forgotten."""
        last = calendar.EPOCH + timedelta(days=(generation + 1) * self.days - 1)
        return calendar.seconds_left(last, self.keep_days, now)

    def lifetime(self) -> Lifetime:
        """As the writers give it; a name without a readable generation gets the longest."""

        def retention(fields: Mapping[str, str], now: float) -> int:
            try:
                generation = int(fields["generation"])
            except ValueError:
                return (self.keep_days + self.days + 1) * DAY_SECONDS
            return max(self.ttl(generation, now), 0)

        return Lifetime("generation", retention, self.keep_days, self.days)


# A first visit is remembered 400 days after the visitor's last visit (browsers keep a cookie at most
# 400 days, so a visitor gone longer cannot come back with the same id), in generations of 100 days:
# 5 can be alive at once (the first-visit script's KEYS: the counter, the tombstones and the shard's
# 5 generations).
VISITORS = Generations(days=100, keep_days=400)
VISITOR_GENERATION = VISITORS.lifetime()

# A person's funnel progress lives the longest window a funnel may have plus STATE_DAYS after the
# latest view a funnel took: the longest month, so the person counts once in it, and a day of
# margin. In generations of 31 days, exactly 3 are alive at once (62 is twice 31): the funnel
# scripts' KEYS[2..4].
STATE_DAYS = 32
FUNNEL_STATES = Generations(days=31, keep_days=MAX_WINDOW // DAY_SECONDS + STATE_DAYS)
FUNNEL_GENERATION = FUNNEL_STATES.lifetime()

# Written by no release since generations; the sweep merges such a key into its shard's current
# generation and deletes it (``store.audience.queue_merge_legacy``), whatever its TTL.
MERGED = Lifetime("merged", lambda fields, now: None)


# Days a first-active or moved bitmap lives past its day: 26 weeks of cohorts behind the oldest
# active bitmap (KEEP_DAYS), plus a week's margin.
COHORT_KEEP_DAYS = 26 * 7 + KEEP_DAYS + 8


def cohort_ttl(day: date, now: float) -> int:
    """Seconds a cohort bitmap of ``day`` still has to live at ``now``; <= 0 once out of retention."""
    return calendar.seconds_left(day, COHORT_KEEP_DAYS, now)


def _cohort_retention(fields: Mapping[str, str], now: float) -> int:
    try:
        day = datetime.strptime(fields["day"], "%Y%m%d").date()
    except ValueError:
        return (COHORT_KEEP_DAYS + 1) * DAY_SECONDS
    return max(cohort_ttl(day, now), 0)


COHORT = Lifetime("dated", _cohort_retention, COHORT_KEEP_DAYS)
