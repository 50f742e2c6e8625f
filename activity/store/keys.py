"""Every Redis key the service uses is built here, each builder declaring its family (pattern, type,
lifetime) with ``@family``. The sweep reads the same declarations, so no key is built without saying
how long it lives and the sweep never gives a key a TTL its writers would not. Keys one script or
MULTI touches together share a hash tag, so every atomic step stays in one Cluster slot.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TypeVar

from activity import calendar, conf
from activity.calendar import DAY_SECONDS

# --- families: what each kind of key is and how long it lives ----------------------------------


@dataclass(frozen=True, slots=True)
class Lifetime:
    """How long a family's keys live, and so what the sweep restores: ``stray_ttl(fields, now)`` is
    the TTL for a key found without one (0: delete it; None: leave it), given its placeholders' values."""

    kind: str  # "long-lived", "ttl", "dated" or "delete"
    stray_ttl: Callable[[Mapping[str, str], float], int | None]
    keep_days: int = 0  # "dated": days kept past the end of the period the name gives


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
_LONGEST_DAYS = {"day": KEEP_DAYS + 1, "week": KEEP_DAYS + 7, "month": KEEP_DAYS + 31}


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
        return _LONGEST_DAYS[period] * DAY_SECONDS
    return max(day_ttl(last, now), 0)


DATED = Lifetime("dated", _dated_retention, KEEP_DAYS)

_PLACEHOLDER = re.compile(r"<(\w+)>")


@dataclass(frozen=True, slots=True)
class Family:
    """One kind of key. ``pattern`` is the key after the prefix, ``<name>`` standing for the
    builder's parameter ``name``; ``redis_type`` is what TYPE answers for it."""

    pattern: str
    redis_type: str
    lifetime: Lifetime
    builder: Callable[..., str] | None
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = _PLACEHOLDER.split(self.pattern)  # literal, name, literal, name, ..., literal
        source = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>.+)" for i, part in enumerate(parts))
        object.__setattr__(self, "regex", re.compile(source))
        if self.lifetime.kind == "dated" and not any(f"<{p}>" in self.pattern for p in _LONGEST_DAYS):
            raise ValueError(f"{self.pattern}: a dated family needs <day>, <week> or <month> in its pattern")


FAMILIES: list[Family] = []

Builder = TypeVar("Builder", bound=Callable[..., str])


def family(pattern: str, redis_type: str, lifetime: Lifetime) -> Callable[[Builder], Builder]:
    """Declare the family of the keys the decorated builder makes."""

    def register(builder: Builder) -> Builder:
        FAMILIES.append(Family(pattern, redis_type, lifetime, builder))
        return builder

    return register


def prefix() -> str:
    return conf.settings.KEY_PREFIX


def sweep_pattern() -> str:
    """SCAN MATCH pattern for every key under the prefix (glob characters in the prefix escaped)."""
    escaped = "".join(f"\\{char}" if char in "*?[]\\" else char for char in prefix())
    return f"{escaped}*"


def family_of(key: str) -> tuple[Family, dict[str, str]] | None:
    """The family ``key`` belongs to and the values of its pattern's placeholders; None when it is
    not under the prefix or matches no family."""
    own = prefix()
    if not key.startswith(own):
        return None
    rest = key[len(own) :]
    for candidate in FAMILIES:
        match = candidate.regex.fullmatch(rest)
        if match:
            return candidate, match.groupdict()
    return None


def stray_ttl(key: str, now: float, default: int) -> int | None:
    """TTL in seconds the sweep gives ``key`` found without one (0: delete); None: leave it alone.
    A key of ours that matches no family gets ``default``."""
    found = family_of(key)
    if found is None:
        return default
    declared, fields = found
    return declared.lifetime.stray_ttl(fields, now)


def page_stats_ttl(stats_days: int, weekly: bool = False) -> int:
    """Seconds a page statistic of a day (``weekly``: of a week, and display names) lives after the
    write that gives it its TTL; also what the sweep gives one found without."""
    return (stats_days + (7 if weekly else 0)) * DAY_SECONDS


def _page_stats(weekly: bool = False) -> Lifetime:
    return fixed(lambda: page_stats_ttl(conf.settings.PAGE_STATS_DAYS, weekly))


# --- last seen and its flush queue, tagged {ls}, or {ls:<partition>} per partition when
# ACTIVITY_LAST_SEEN_PARTITIONS > 1 (a Cluster then spreads the writes; a script stays in one slot).


@family("{ls}:seen", "zset", LONG_LIVED)
def last_seen() -> str:
    """Sorted set: user id -> last-seen epoch seconds, written only forward."""
    return f"{prefix()}{{ls}}:seen"


@family("{ls}:dirty", "zset", LONG_LIVED)
def last_seen_dirty() -> str:
    """Sorted set: users whose last seen changed since the last flush, score = first change time."""
    return f"{prefix()}{{ls}}:dirty"


@family("{ls}:claimed", "zset", LONG_LIVED)
def last_seen_claimed() -> str:
    """Sorted set: users claimed by a running flush, score = claim time (reliable-queue pattern)."""
    return f"{prefix()}{{ls}}:claimed"


# Tombstones of erased users (docs/privacy.md): one set per hash tag whose scripts write user data,
# so each script checks its own slot's set. Always written with a TTL (its latest tombstone's).
@family("{<tag>}:erased", "zset", DELETE)
def tombstones(tag: str) -> str:
    """Sorted set: member = an erased user id (in ``{vis:N}``: the user's 16-byte visitor id),
    score = when its tombstone expires; writes of the ``{tag}`` slot skip a member until then."""
    return f"{prefix()}{{{tag}}}:erased"


@family("{ls:<partition>}:seen", "zset", LONG_LIVED)
def last_seen_partition(partition: int) -> str:
    """Sorted set: ``last_seen`` of the users whose id hashes to ``partition``."""
    return f"{prefix()}{{ls:{partition}}}:seen"


@family("{ls:<partition>}:dirty", "zset", LONG_LIVED)
def last_seen_dirty_partition(partition: int) -> str:
    """Sorted set: ``last_seen_dirty`` of the partition (same hash tag as its last seen)."""
    return f"{prefix()}{{ls:{partition}}}:dirty"


@family("{ls:<partition>}:claimed", "zset", LONG_LIVED)
def last_seen_claimed_partition(partition: int) -> str:
    """Sorted set: ``last_seen_claimed`` of the partition (same hash tag as its last seen)."""
    return f"{prefix()}{{ls:{partition}}}:claimed"


# A lock without a TTL would block its job forever; an announcement list without one is a leftover.
@family("lock:{<name>}", "string", DELETE)
def lock(name: str) -> str:
    """String: a lock's random holder token (SET NX PX), tagged with its name so the lock and its
    announcement list share a Cluster slot."""
    return f"{prefix()}lock:{{{name}}}"


@family("lock:{<name>}:signal", "list", DELETE)
def lock_signal(name: str) -> str:
    """List: the lock's release announcements, which waiters BLPOP on (TTL: the lock's)."""
    return f"{lock(name)}:signal"


@family("health", "string", DELETE)
def health() -> str:
    """String: the health check's write probe (TTL: a few seconds)."""
    return f"{prefix()}health"


# A fixed window's counter is read only during its window; one without a TTL is a leftover.
@family("rate:<scope>:<ident>:<window>", "string", DELETE)
def rate_limit(scope: str, ident: str, window: int) -> str:
    """String counter: requests of client ``ident`` under ``scope`` in fixed window number ``window``
    (TTL: the window's length plus a second, renewed with each count)."""
    return f"{prefix()}rate:{scope}:{ident}:{window}"


@family("traffic:<day>", "hash", DATED)
def traffic(day: str) -> str:
    """Hash: requests on ``day`` (YYYYMMDD) that were not people's, by kind (``bot``, ``machine``)."""
    return f"{prefix()}traffic:{day}"


# --- visitors and audience figures ---------------------------------------------------------------
# First visits are spread over audience.VISITOR_SHARDS tags {vis:N}, a visitor's partition hash and
# the counter it increments sharing one. Active users ({au}) and unique visitors ({uv}) go into the
# day's, week's and month's keys at once, so a week or month figure is one count, never a union.


@family("{vis:<shard>}:seen:<partition>", "hash", LONG_LIVED)
def visitor_seen(shard: int, partition: int) -> str:
    """Hash: 16-byte visitor id -> day number of its first visit ever."""
    return f"{prefix()}{{vis:{shard}}}:seen:{partition}"


@family("{vis:<shard>}:new:<day>", "string", DATED)
def new_visitors(shard: int, day: str) -> str:
    """String counter: new visitors on ``day`` (YYYYMMDD) in this shard, until harvested."""
    return f"{prefix()}{{vis:{shard}}}:new:{day}"


@family("{vis:<shard>}:harvested:<day>", "string", DATED)
def new_visitors_harvested(shard: int, day: str) -> str:
    """String: new visitors of ``day`` harvested from the counter so far (the rollup's input)."""
    return f"{prefix()}{{vis:{shard}}}:harvested:{day}"


@family("{uv}:day:<day>", "string", DATED)
def unique_visitors(day: str) -> str:
    """HyperLogLog: anonymous visitors seen on ``day`` (signed-in ones count as active users)."""
    return f"{prefix()}{{uv}}:day:{day}"


@family("{uv}:week:<week>", "string", DATED)
def unique_visitors_week(week: str) -> str:
    """HyperLogLog: anonymous visitors seen in ISO ``week`` (YYYYWww)."""
    return f"{prefix()}{{uv}}:week:{week}"


@family("{uv}:month:<month>", "string", DATED)
def unique_visitors_month(month: str) -> str:
    """HyperLogLog: anonymous visitors seen in ``month`` (YYYYMM)."""
    return f"{prefix()}{{uv}}:month:{month}"


@family("{au}:bits:day:<day>", "string", DATED)
def active_bits(day: str) -> str:
    """Bitmap: bit N set when the user with integer id N was active on ``day``."""
    return f"{prefix()}{{au}}:bits:day:{day}"


@family("{au}:hll:day:<day>", "string", DATED)
def active_hll(day: str) -> str:
    """HyperLogLog: active users on ``day`` whose ids have no bit (not integers up to ``audience.MAX_ID``)."""
    return f"{prefix()}{{au}}:hll:day:{day}"


@family("{au}:bits:week:<week>", "string", DATED)
def active_bits_week(week: str) -> str:
    """Bitmap: bit N set when the user with integer id N was active in ISO ``week``."""
    return f"{prefix()}{{au}}:bits:week:{week}"


@family("{au}:bits:month:<month>", "string", DATED)
def active_bits_month(month: str) -> str:
    """Bitmap: bit N set when the user with integer id N was active in ``month``."""
    return f"{prefix()}{{au}}:bits:month:{month}"


@family("{au}:hll:week:<week>", "string", DATED)
def active_hll_week(week: str) -> str:
    """HyperLogLog: active users in ISO ``week`` whose ids have no bit."""
    return f"{prefix()}{{au}}:hll:week:{week}"


@family("{au}:hll:month:<month>", "string", DATED)
def active_hll_month(month: str) -> str:
    """HyperLogLog: active users in ``month`` whose ids have no bit."""
    return f"{prefix()}{{au}}:hll:month:{month}"


# --- group membership bitmaps: tagged {au}, so one script ANDs them with the active-user bitmaps --
# Not {grp}: a script's keys share one slot, and the day's, week's and month's bitmaps are {au}.


@family("{au}:group:<group_id>", "string", LONG_LIVED)
def group_members(group_id: int) -> str:
    """Bitmap: bit N set when the user with integer id N is a member of the group (the database's
    membership, mirrored when it changes; ``activity_backfill`` rebuilds it)."""
    return f"{prefix()}{{au}}:group:{group_id}"


@family("{au}:group-and", "string", DELETE)
def group_active_scratch() -> str:
    """Bitmap: a group's bitmap AND a period's, written and deleted inside one script call."""
    return f"{prefix()}{{au}}:group-and"


# --- navigation sessions and page-view statistics: all tagged {pv} -----------------------------
# One tag: a page-view script writes users' keys together with the shared per-day keys, and the
# reports' SORT BY/GET reads per-user keys, which a Cluster allows only in the sorted key's slot.
# Page statistics live PAGE_STATS_DAYS (a week's 7 more) from the write that gives them their TTL,
# and the sweep gives that to one found without (the week's, the longer, to keys of either period).

PV_TAG = "{pv}"


@family("{pv}:session:<user>", "list", fixed(lambda: conf.settings.SESSION_WINDOW))
def session(user: str) -> str:
    """List: the user's current navigation session, sorted by ts, oldest page first, renewed by
    each view it takes."""
    return f"{prefix()}{PV_TAG}:session:{user}"


@family("{pv}:name:<user>", "string", _page_stats(weekly=True))
def display_name(user: str) -> str:
    """String: the user's username, or the user id until one is known."""
    return f"{prefix()}{PV_TAG}:name:{user}"


@family("{pv}:aliases:<user>", "set", _page_stats(weekly=True))
def display_aliases(user: str) -> str:
    """Set: the user's former display names, kept on a rename so an erase finds the entries past
    periods' by-name indexes still hold under them."""
    return f"{prefix()}{PV_TAG}:aliases:{user}"


def display_name_pattern() -> str:
    """SORT BY/GET pattern over ``display_name``."""
    return display_name("*")


@family("{pv}:started:<day>", "string", _page_stats())
def sessions_started(day: str) -> str:
    """String counter: sessions started on ``day`` (YYYYMMDD, local)."""
    return f"{prefix()}{PV_TAG}:started:{day}"


@family("{pv}:views:<day>", "string", _page_stats())
def page_views(day: str) -> str:
    """String counter: page views on ``day``."""
    return f"{prefix()}{PV_TAG}:views:{day}"


@family("{pv}:paths:<day>", "zset", _page_stats())
def path_views(day: str) -> str:
    """Sorted set: path -> its page views on ``day``, the ``sessions.MAX_PATHS_PER_DAY`` most viewed kept."""
    return f"{prefix()}{PV_TAG}:paths:{day}"


# A day's transitions are two sorted sets of the same "page NUL next page" members: one counts each
# step, the other (scores 0) finds a page's steps by one ZRANGEBYLEX. Two keys a day, not one a page:
# a script can declare them, and keys do not grow with the paths. Members are capped per page and day.
@family("{pv}:next:<day>", "zset", _page_stats())
def transitions(day: str) -> str:
    """Sorted set: "page NUL next page" -> how often one followed the other in a session on ``day``,
    each page's ``sessions.MAX_NEXT_PAGES`` and the day's ``sessions.MAX_TRANSITIONS_PER_DAY`` most frequent kept."""
    return f"{prefix()}{PV_TAG}:next:{day}"


@family("{pv}:next-index:<day>", "zset", _page_stats())
def transitions_index(day: str) -> str:
    """Sorted set, every score 0: the members of ``transitions(day)``, so a page's steps are one
    ``ZRANGEBYLEX [page NUL (page \\x01``."""
    return f"{prefix()}{PV_TAG}:next-index:{day}"


@family("{pv}:next-cdf:<window>:<path>", "zset", DELETE)
def transitions_cdf(window: str, path: str) -> str:
    """Sorted set: the pages that followed ``path`` over ``window`` (last day + days), scored by the
    running sum of their counts, for weighted picks by ZRANGEBYSCORE."""
    return f"{prefix()}{PV_TAG}:next-cdf:{window}:{path}"


@family("{pv}:next-total:<window>:<path>", "string", DELETE)
def transitions_total(window: str, path: str) -> str:
    """String: the sum of the counts in ``transitions_cdf``; it also marks a built copy, even an empty one."""
    return f"{prefix()}{PV_TAG}:next-total:{window}:{path}"


@family("{pv}:recs:<user>", "string", DELETE)
def recommendations(user: str) -> str:
    """String: the user's recommendations as last computed, after the fingerprint of the session
    and window they were computed for."""
    return f"{prefix()}{PV_TAG}:recs:{user}"


@family("{pv}:uv:<period>:<user>", "string", _page_stats(weekly=True))
def user_views(period: str, user: str) -> str:
    """String counter: one user's page views in ``period`` (``d:YYYYMMDD`` or ``w:YYYYWww``)."""
    return f"{prefix()}{PV_TAG}:uv:{period}:{user}"


def user_views_pattern(period: str) -> str:
    """SORT BY/GET pattern over ``user_views`` of one period."""
    return user_views(period, "*")


@family("{pv}:top:<period>", "zset", _page_stats(weekly=True))
def top_viewers(period: str) -> str:
    """Sorted set: user id -> page views in ``period`` of the ``sessions.CANDIDATES`` users with the
    most (ties: the greater id, as SORT ... DESC), from which ``most-active`` is built."""
    return f"{prefix()}{PV_TAG}:top:{period}"


# The display name never holds a NUL (Django usernames and user ids cannot), so "name NUL user"
# sorts by name, then by user id, byte by byte.
NAME_SEPARATOR = "\0"


@family("{pv}:byname:<period>", "zset", _page_stats(weekly=True))
def viewers_by_name(period: str) -> str:
    """Sorted set, every score 0: "name NUL user id" of each user with page views in ``period``
    (once merged from the pending set), which ``active-by-name`` pages by rank."""
    return f"{prefix()}{PV_TAG}:byname:{period}"


# Not ``byname:<period>:pending``: the index's ``<period>`` would match that name too, and each key
# belongs to exactly one family.
@family("{pv}:byname-pending:<period>", "set", _page_stats(weekly=True))
def viewers_by_name_pending(period: str) -> str:
    """Set: "name NUL user id" entries of ``period`` not yet merged into ``viewers_by_name``.

    An SADD at a user's first view is O(1) where an ordered insert is O(log N); reads and the refresh
    job merge a bounded slice per call. The empty string marks a set that has its TTL.
    """
    return f"{prefix()}{PV_TAG}:byname-pending:{period}"


# --- cached reports: tagged {pv} too, so SORT's source, patterns and STORE share one slot ------
# A copy found without a TTL is deleted: the next read rebuilds it.


@family("{pv}:report:<report_id>:rows", "list", DELETE)
def report_rows(report_id: str) -> str:
    """List: a report's rows, user, name and views in turn, as SORT ... GET ... STORE lays them out."""
    return f"{prefix()}{PV_TAG}:report:{report_id}:rows"


@family("{pv}:report:<report_id>:candidates", "zset", DELETE)
def report_candidates(report_id: str) -> str:
    """Sorted set: the top K of a period's ``top_viewers``, copied for one SORT and deleted in the
    same MULTI."""
    return f"{prefix()}{PV_TAG}:report:{report_id}:candidates"


@family("{pv}:report:<report_id>:meta", "string", DELETE)
def report_meta(report_id: str) -> str:
    """String: when the report was built (epoch seconds); it also marks a built but empty report,
    since SORT ... STORE of nothing stores no list."""
    return f"{prefix()}{PV_TAG}:report:{report_id}:meta"


# Reports read this recently are the ones the refresh job keeps fresh (seconds).
REPORT_READ_WINDOW = 600


@family("{pv}:reports:read", "zset", fixed(lambda: REPORT_READ_WINDOW))
def reports_read() -> str:
    """Sorted set: ``name:period`` of each report -> when it was last read; the refresh job's work list."""
    return f"{prefix()}{PV_TAG}:reports:read"


# --- group views: every key tagged {grp}, so one Lua call or MULTI may touch any of them ---------
# Apart from {ls}: a build reads last seen in its own round trip. A key found without a TTL is a
# leftover; deleting it is safe, as the next read rebuilds the view.


@family("{grp}:view:<group_id>", "zset", DELETE)
def group_view(group_id: int) -> str:
    """Sorted set: member of the group -> last seen (-1: never seen)."""
    return f"{prefix()}{{grp}}:view:{group_id}"


@family("{grp}:build:<group_id>:<token>", "zset", DELETE)
def group_view_build(group_id: int, token: str) -> str:
    """Sorted set: a view being built, RENAMEd over the view when complete."""
    return f"{prefix()}{{grp}}:build:{group_id}:{token}"


@family("{grp}:epoch:<group_id>", "string", DELETE)
def group_epoch(group_id: int) -> str:
    """String counter bumped on each membership change, so a build that raced one is discarded."""
    return f"{prefix()}{{grp}}:epoch:{group_id}"


@family("{grp}:user:<user>", "set", DELETE)
def user_groups(user: str) -> str:
    """Set: ids of the groups of ``user`` whose views were built, so an event finds the views to update."""
    return f"{prefix()}{{grp}}:user:{user}"


# --- retention cohorts (docs/cohorts.md): tagged {au}, so a BITOP reads cohorts and active users
# in one slot. Cohort bitmaps outlive the active ones: a 26-week table still reads its cohorts when
# the rollup stores the cells of a week about to leave the active bitmaps' retention.

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


@family("{au}:first-day", "string", LONG_LIVED)
def first_day() -> str:
    """String, a BITFIELD of u16: at offset 16 x user id, the day number of the user's first activity
    (0: none known)."""
    return f"{prefix()}{{au}}:first-day"


@family("{au}:first:day:<day>", "string", COHORT)
def first_active(day: str) -> str:
    """Bitmap: bit N set when the user with integer id N was first active on ``day`` (YYYYMMDD)."""
    return f"{prefix()}{{au}}:first:day:{day}"


@family("{au}:moved:day:<day>", "string", COHORT)
def first_moved(day: str) -> str:
    """Bitmap: bit N set when a late event made ``day`` the first day of user N in place of a later
    one, whose first-active bitmap still holds the bit (cohort reads leave the user out there)."""
    return f"{prefix()}{{au}}:moved:day:{day}"


@family("{au}:scratch:<token>:<name>", "string", DELETE)
def cohort_scratch(token: str, name: str) -> str:
    """Bitmap: an intermediate of one table build (a cohort, a group, a cell), deleted by the build
    and written with a TTL of a few seconds in case the build dies."""
    return f"{prefix()}{{au}}:scratch:{token}:{name}"


@family("{au}:retention:<table_id>", "string", DELETE)
def retention_table(table_id: str) -> str:
    """String: a cached retention table (JSON with its build time), kept its freshness plus the
    stale margin."""
    return f"{prefix()}{{au}}:retention:{table_id}"
