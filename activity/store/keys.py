"""Every Redis key the service uses is built here, and each builder declares its key family.

Keys start with ``ACTIVITY_KEY_PREFIX``. Keys that one Lua script or one MULTI touches together
share a Redis Cluster hash tag (``{...}``) so the service runs unchanged on a Cluster.

A family is one kind of key: its pattern, its Redis type and how long its keys live (long-lived,
a fixed TTL, a retention counted from the day in the key's name, or deleted when found without a
TTL). The declaration sits on the builder (``@family``) and the sweep reads the same declarations
(``stray_ttl``), so a key cannot be built without saying how long it lives, and the sweep never
gives a key a TTL its writers would not (``tests/test_sweep.py`` holds both to it).
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
    """How long a family's keys live: what the writers give them, and so what the sweep restores.

    ``stray_ttl(fields, now)`` is the TTL in seconds for a key found without one (0: delete it;
    None: leave it alone), ``fields`` being the values of the key's pattern placeholders.
    """

    kind: str  # "long-lived", "ttl", "dated" or "delete"
    stray_ttl: Callable[[Mapping[str, str], float], int | None]


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
    """A key of a day, ISO week or month lives until the period's last day ends + ``KEEP_DAYS``, as
    ``activity.store.audience`` writes it; one out of retention is deleted (no writer renews it), one
    whose name holds no readable period gets the longest TTL a writer gives."""
    period = next(name for name in calendar.PERIODS if name in fields)
    try:
        if period == "day":
            last = datetime.strptime(fields["day"], "%Y%m%d").date()
        else:
            last = calendar.last_day(period, calendar.parse_period(period, fields[period]))
    except ValueError:
        return _LONGEST_DAYS[period] * DAY_SECONDS
    return max(day_ttl(last, now), 0)


DATED = Lifetime("dated", _dated_retention)

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
    """Seconds a per-day page statistic (``weekly``: per-week ones and display names) lives: from
    its first write for counters and the day's paths, its last for display names and the keys
    listing a period's users (the page-view scripts, ``activity.store.sessions``), and the sweep's
    TTL for one without."""
    return (stats_days + (7 if weekly else 0)) * DAY_SECONDS


def _page_stats(weekly: bool = False) -> Lifetime:
    return fixed(lambda: page_stats_ttl(conf.settings.PAGE_STATS_DAYS, weekly))


# --- last seen: one sorted set plus the "changed since last flush" index, all tagged {ls} ------
# With ACTIVITY_LAST_SEEN_PARTITIONS = N > 1 the three are split by a hash of the user id into N
# partitions, each tagged {ls:<partition>} (so a Cluster spreads them over its shards while one
# script still touches one slot); N = 1 keeps the unpartitioned names below, and their data.


@family("{ls}:seen", "zset", LONG_LIVED)
def last_seen() -> str:
    """Sorted set: member = user id, score = last-seen epoch seconds. Long-lived."""
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
    """Sorted set: ``last_seen`` of the users whose id hashes to ``partition``. Long-lived."""
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
    """String: a lock (SET NX PX with a random token). Always has a TTL. Tagged with its name, so
    the lock and its announcement list share a Cluster slot."""
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
    (TTL: the window's length, set with the first request)."""
    return f"{prefix()}rate:{scope}:{ident}:{window}"


@family("traffic:<day>", "hash", DATED)
def traffic(day: str) -> str:
    """Hash: requests on ``day`` (YYYYMMDD) that were not people's, by kind (``bot``, ``machine``)."""
    return f"{prefix()}traffic:{day}"


# --- visitors and audience figures ---------------------------------------------------------------
# "First visit ever" hashes and their per-day new-visitor counters are spread over VISITOR_SHARDS
# hash tags {vis:N} (N = low bits of the visitor id), so a Cluster spreads the membership store over
# several slots while one Lua call still touches one slot: a visitor's partition hash and the
# counter it increments share the shard's tag. Active users and unique visitors are written into
# their day's, week's and month's keys at once, so a week or month figure is one count, never a
# union over days; each family has one tag: {au} and {uv}.


@family("{vis:<shard>}:seen:<partition>", "hash", LONG_LIVED)
def visitor_seen(shard: int, partition: int) -> str:
    """Hash: field = 16-byte visitor id, value = day number of the first visit. Long-lived."""
    return f"{prefix()}{{vis:{shard}}}:seen:{partition}"


@family("{vis:<shard>}:new:<day>", "string", DATED)
def new_visitors(shard: int, day: str) -> str:
    """String counter: new visitors on ``day`` (YYYYMMDD) in this shard, until harvested. TTL."""
    return f"{prefix()}{{vis:{shard}}}:new:{day}"


@family("{vis:<shard>}:harvested:<day>", "string", DATED)
def new_visitors_harvested(shard: int, day: str) -> str:
    """String: new visitors of ``day`` harvested from the counter so far (the rollup's input). TTL."""
    return f"{prefix()}{{vis:{shard}}}:harvested:{day}"


@family("{uv}:day:<day>", "string", DATED)
def unique_visitors(day: str) -> str:
    """HyperLogLog: the anonymous visitors seen on ``day`` (signed-in ones count as active users). TTL."""
    return f"{prefix()}{{uv}}:day:{day}"


@family("{uv}:week:<week>", "string", DATED)
def unique_visitors_week(week: str) -> str:
    """HyperLogLog: the anonymous visitors seen in ISO ``week`` (YYYYWww). TTL."""
    return f"{prefix()}{{uv}}:week:{week}"


@family("{uv}:month:<month>", "string", DATED)
def unique_visitors_month(month: str) -> str:
    """HyperLogLog: the anonymous visitors seen in ``month`` (YYYYMM). TTL."""
    return f"{prefix()}{{uv}}:month:{month}"


@family("{au}:bits:day:<day>", "string", DATED)
def active_bits(day: str) -> str:
    """Bitmap: bit N set when the user with integer id N was active on ``day``. TTL."""
    return f"{prefix()}{{au}}:bits:day:{day}"


@family("{au}:hll:day:<day>", "string", DATED)
def active_hll(day: str) -> str:
    """HyperLogLog: active users on ``day`` whose ids are not small integers. TTL."""
    return f"{prefix()}{{au}}:hll:day:{day}"


@family("{au}:bits:week:<week>", "string", DATED)
def active_bits_week(week: str) -> str:
    """Bitmap: bit N set when the user with integer id N was active in ISO ``week``. TTL."""
    return f"{prefix()}{{au}}:bits:week:{week}"


@family("{au}:bits:month:<month>", "string", DATED)
def active_bits_month(month: str) -> str:
    """Bitmap: bit N set when the user with integer id N was active in ``month``. TTL."""
    return f"{prefix()}{{au}}:bits:month:{month}"


@family("{au}:hll:week:<week>", "string", DATED)
def active_hll_week(week: str) -> str:
    """HyperLogLog: active users in ISO ``week`` whose ids are not small integers. TTL."""
    return f"{prefix()}{{au}}:hll:week:{week}"


@family("{au}:hll:month:<month>", "string", DATED)
def active_hll_month(month: str) -> str:
    """HyperLogLog: active users in ``month`` whose ids are not small integers. TTL."""
    return f"{prefix()}{{au}}:hll:month:{month}"


# --- navigation sessions and page-view statistics: all tagged {pv} -----------------------------
# One tag because each page-view script of a batch writes every user's keys (session list,
# counters, name) together with the shared per-day keys, and because the reports' SORT reads the
# per-user counters and names through BY/GET patterns, which Redis Cluster allows only within the
# sorted key's slot.
# Page statistics live PAGE_STATS_DAYS (weekly ones 7 more), whatever their day: counters and the
# day's paths after their first write, display names after their last, and the keys listing a
# period's users after its latest new user, merge or (pending sets) first entry since a merge; so
# the sweep gives one found without a TTL
# exactly that (per-user counters, candidates, by-name indexes and their pending sets of either
# period: the week's, the longer).

PV_TAG = "{pv}"


@family("{pv}:session:<user>", "list", fixed(lambda: conf.settings.SESSION_WINDOW))
def session(user: str) -> str:
    """List: the user's current navigation session, oldest page first (TTL = session window)."""
    return f"{prefix()}{PV_TAG}:session:{user}"


@family("{pv}:name:<user>", "string", _page_stats(weekly=True))
def display_name(user: str) -> str:
    """String: the user's username, or the user id until one is known (TTL: week statistics)."""
    return f"{prefix()}{PV_TAG}:name:{user}"


@family("{pv}:aliases:<user>", "set", _page_stats(weekly=True))
def display_aliases(user: str) -> str:
    """Set: the user's former display names, which past periods' by-name indexes may still hold
    (written on a rename only; TTL: as those indexes), so an erase finds every entry."""
    return f"{prefix()}{PV_TAG}:aliases:{user}"


def display_name_pattern() -> str:
    """SORT BY/GET pattern over ``display_name``."""
    return display_name("*")


@family("{pv}:started:<day>", "string", _page_stats())
def sessions_started(day: str) -> str:
    """String counter: sessions started on ``day`` (YYYYMMDD, UTC) (TTL: day statistics)."""
    return f"{prefix()}{PV_TAG}:started:{day}"


@family("{pv}:views:<day>", "string", _page_stats())
def page_views(day: str) -> str:
    """String counter: page views on ``day`` (TTL: day statistics)."""
    return f"{prefix()}{PV_TAG}:views:{day}"


@family("{pv}:paths:<day>", "zset", _page_stats())
def path_views(day: str) -> str:
    """Sorted set: member = path, score = its page views on ``day``, the top
    ``ACTIVITY_PAGE_STATS_MAX_PATHS`` kept (TTL: day statistics)."""
    return f"{prefix()}{PV_TAG}:paths:{day}"


# A day's transitions are two sorted sets of the same members, "page NUL next page" (a page never
# holds a NUL; lua/session_record.lua counts no step of one that does): one counts each step, the
# other (every score 0) finds a page's steps by one ZRANGEBYLEX. Their number does not grow with the
# paths, and lua/session_record.lua bounds their members per page and per day.
@family("{pv}:next:<day>", "zset", _page_stats())
def transitions(day: str) -> str:
    """Sorted set: member = a page, NUL, a page viewed next after it in a session on ``day``, score =
    how often; each page's ``ACTIVITY_TRANSITIONS_MAX_NEXT`` most frequent kept, and the day's
    ``sessions.MAX_TRANSITIONS_PER_DAY`` most frequent in all (TTL: day statistics)."""
    return f"{prefix()}{PV_TAG}:next:{day}"


@family("{pv}:next-index:<day>", "zset", _page_stats())
def transitions_index(day: str) -> str:
    """Sorted set, every score 0: the members of ``transitions(day)``, so a page's steps are
    ``ZRANGEBYLEX [page NUL (page \\x01`` (written and trimmed with it; TTL: day statistics)."""
    return f"{prefix()}{PV_TAG}:next-index:{day}"


@family("{pv}:next-cdf:<window>:<path>", "zset", DELETE)
def transitions_cdf(window: str, path: str) -> str:
    """Sorted set: the pages that followed ``path`` over ``window`` (last day + days), score = running
    sum of their counts, for weighted picks by ZRANGEBYSCORE (TTL: report TTL + stale grace)."""
    return f"{prefix()}{PV_TAG}:next-cdf:{window}:{path}"


@family("{pv}:next-total:<window>:<path>", "string", DELETE)
def transitions_total(window: str, path: str) -> str:
    """String: the sum of the counts in ``transitions_cdf``; marks a built copy, even an empty one
    (same TTL as the copy, fresh while its PTTL exceeds the stale grace)."""
    return f"{prefix()}{PV_TAG}:next-total:{window}:{path}"


@family("{pv}:recs:<user>", "string", DELETE)
def recommendations(user: str) -> str:
    """String: the user's recommendations as last computed, after the fingerprint of the session
    and window they were computed for (TTL: report TTL)."""
    return f"{prefix()}{PV_TAG}:recs:{user}"


@family("{pv}:uv:<period>:<user>", "string", _page_stats(weekly=True))
def user_views(period: str, user: str) -> str:
    """String counter: one user's page views in ``period`` (``d:YYYYMMDD`` or ``w:YYYYWww``); TTL set
    when its first view creates it."""
    return f"{prefix()}{PV_TAG}:uv:{period}:{user}"


def user_views_pattern(period: str) -> str:
    """SORT BY/GET pattern over ``user_views`` of one period."""
    return user_views(period, "*")


@family("{pv}:top:<period>", "zset", _page_stats(weekly=True))
def top_viewers(period: str) -> str:
    """Sorted set: user id -> page views in ``period`` of the ``ACTIVITY_REPORT_CANDIDATES`` users
    with the most (ties: the greater user id, as SORT ... DESC), kept by ``lua/viewer_rank.lua``; the
    ``most-active`` report sorts its top K (TTL: as the period's counters, renewed with each new one)."""
    return f"{prefix()}{PV_TAG}:top:{period}"


# The display name never holds a NUL (Django usernames and user ids cannot), so "name NUL user"
# sorts by name, then by user id, byte by byte.
NAME_SEPARATOR = "\0"


@family("{pv}:byname:<period>", "zset", _page_stats(weekly=True))
def viewers_by_name(period: str) -> str:
    """Sorted set, every score 0: member = display name, NUL, user id, for each user with page views
    in ``period`` merged from ``viewers_by_name_pending``; the ``active-by-name`` report pages it by
    rank (TTL: as the period's counters, renewed by each merge that moves entries in)."""
    return f"{prefix()}{PV_TAG}:byname:{period}"


# Not ``byname:<period>:pending``: the index's ``<period>`` would match that name too, and each key
# belongs to exactly one family.
@family("{pv}:byname-pending:<period>", "set", _page_stats(weekly=True))
def viewers_by_name_pending(period: str) -> str:
    """Set: "name NUL user" entries of ``period`` not yet in ``viewers_by_name``.
    ``lua/viewer_names.lua`` adds a user's entry at its first view of the period or at a rename (an
    SADD, O(1), where an ordered insert into the index is O(log N)); the by-name read and the
    refresh job move them into the index a bounded slice per call. The set also holds a marker, the empty
    string, so the script's SADD tells when the set is new and gets its TTL (as the period's
    counters, from the first entry since the set was made or a merge took the marker), without an
    EXPIRE at every new viewer."""
    return f"{prefix()}{PV_TAG}:byname-pending:{period}"


# --- cached reports: tagged {pv} too, so SORT's source, patterns and STORE share one slot ------
# A copy found without a TTL is deleted: the next read rebuilds it.


@family("{pv}:report:<report_id>:rows", "list", DELETE)
def report_rows(report_id: str) -> str:
    """List: a report's rows as SORT ... STORE wrote them (TTL = report TTL + stale grace)."""
    return f"{prefix()}{PV_TAG}:report:{report_id}:rows"


@family("{pv}:report:<report_id>:candidates", "zset", DELETE)
def report_candidates(report_id: str) -> str:
    """Sorted set: the top K of a period's ``top_viewers``, copied for one SORT and deleted in the
    same MULTI."""
    return f"{prefix()}{PV_TAG}:report:{report_id}:candidates"


@family("{pv}:report:<report_id>:meta", "string", DELETE)
def report_meta(report_id: str) -> str:
    """String: when the report was built (epoch seconds); same TTL as its rows, so it also marks
    a built-but-empty report (SORT ... STORE of nothing stores no list)."""
    return f"{prefix()}{PV_TAG}:report:{report_id}:meta"


# Reports read this recently are the ones the refresh job keeps fresh (seconds).
REPORT_READ_WINDOW = 600


@family("{pv}:reports:read", "zset", fixed(lambda: REPORT_READ_WINDOW))
def reports_read() -> str:
    """Sorted set: report = name:period, score = last read time; the refresh job's work list
    (TTL: the read window, renewed by every read)."""
    return f"{prefix()}{PV_TAG}:reports:read"


# --- group views: every key tagged {grp}, so one Lua call or MULTI may touch any of them ---------
# Tagged apart from {ls}: the build reads last seen in its own round trip (see store/groups.py).
# Every key of the family has a TTL; one without is a rogue partial view (the TTL guard can leave
# one) or a leftover, and deleting it is safe: the next read rebuilds it.


@family("{grp}:view:<group_id>", "zset", DELETE)
def group_view(group_id: int) -> str:
    """Sorted set: member = user id, score = last seen (-1 = never seen). TTL GROUP_VIEW_TTL."""
    return f"{prefix()}{{grp}}:view:{group_id}"


@family("{grp}:build:<group_id>:<token>", "zset", DELETE)
def group_view_build(group_id: int, token: str) -> str:
    """Sorted set: a view being built, RENAMEd over the view when complete. Short TTL."""
    return f"{prefix()}{{grp}}:build:{group_id}:{token}"


@family("{grp}:epoch:<group_id>", "string", DELETE)
def group_epoch(group_id: int) -> str:
    """String counter bumped on each membership change, so a build that raced one is discarded."""
    return f"{prefix()}{{grp}}:epoch:{group_id}"


@family("{grp}:user:<user>", "set", DELETE)
def user_groups(user: str) -> str:
    """Set: ids of the groups of ``user`` whose views were built; TTL outlives those views."""
    return f"{prefix()}{{grp}}:user:{user}"
