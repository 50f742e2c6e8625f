"""Every Redis key the service uses is named here, each builder declaring its family (pattern, type,
lifetime: ``store.lifetimes``) with ``@family`` (``store.families``, the sweep's registry). The sweep
reads the same declarations, so no key is built without saying how long it lives and the sweep
never gives a key a TTL its writers would not. Keys one script or
MULTI touches together share a hash tag, so every atomic step stays in one Cluster slot.
"""

from __future__ import annotations

from activity import conf
from activity.store import lifetimes
from activity.store.families import family, match_pattern, prefix
from activity.store.lifetimes import (
    COHORT,
    DATED,
    DELETE,
    FUNNEL_GENERATION,
    LONG_LIVED,
    MERGED,
    VISITOR_GENERATION,
    fixed,
)

# --- last seen and its flush queue, one hash tag {ls:<partition>} per partition
# (ACTIVITY_LAST_SEEN_PARTITIONS): a Cluster spreads the writes; a script stays in one slot.


@family("{ls:<partition>}:seen", "zset", LONG_LIVED)
def last_seen(partition: int) -> str:
    """Sorted set: user id -> last-seen epoch seconds, written only forward, for the users whose id
    hashes to ``partition``."""
    return f"{prefix()}{{ls:{partition}}}:seen"


@family("{ls:<partition>}:dirty", "zset", LONG_LIVED)
def last_seen_dirty(partition: int) -> str:
    """Sorted set: the partition's users whose last seen changed since the last flush, score = first
    change time."""
    return f"{prefix()}{{ls:{partition}}}:dirty"


@family("{ls:<partition>}:claimed", "zset", LONG_LIVED)
def last_seen_claimed(partition: int) -> str:
    """Sorted set: the partition's users claimed by a running flush, score = claim time
    (reliable-queue pattern)."""
    return f"{prefix()}{{ls:{partition}}}:claimed"


# The one-set layout of earlier releases: read only by ``manage.py activity_upgrade``, which moves it
# into the partitions. Long-lived, so the sweep never gives an installation's data a TTL before that.
@family("{ls}:seen", "zset", LONG_LIVED)
def unpartitioned_last_seen() -> str:
    """Sorted set: last seen of every user, as earlier releases kept it by default."""
    return f"{prefix()}{{ls}}:seen"


@family("{ls}:dirty", "zset", LONG_LIVED)
def unpartitioned_last_seen_dirty() -> str:
    """Sorted set: the one-set layout's unflushed changes."""
    return f"{prefix()}{{ls}}:dirty"


@family("{ls}:claimed", "zset", LONG_LIVED)
def unpartitioned_last_seen_claimed() -> str:
    """Sorted set: the one-set layout's claims of a flush."""
    return f"{prefix()}{{ls}}:claimed"


# Tombstones of erased users (docs/privacy.md): one set per hash tag whose scripts write user data,
# so each script checks its own slot's set. Always written with a TTL (its latest tombstone's).
@family("{<tag>}:erased", "zset", DELETE)
def tombstones(tag: str) -> str:
    """Sorted set: member = an erased user id (in ``{vis:N}``: the user's 16-byte visitor id; in
    ``{au}``: the 12-byte digest of the dense id map),
    score = when its tombstone expires; writes of the ``{tag}`` slot skip a member until then."""
    return f"{prefix()}{{{tag}}}:erased"


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
# First visits are spread over audience.VISITOR_SHARDS tags {vis:N}, a shard's generation hashes and
# the counter it increments sharing one. Active users ({au}) and unique visitors ({uv}) go into the
# day's, week's and month's keys at once, so a week or month figure is one count, never a union.


@family("{vis:<shard>}:gen:<generation>", "hash", VISITOR_GENERATION)
def visitor_generation(shard: int, generation: int) -> str:
    """Hash: 16-byte visitor id -> day number of its first visit ever, for the shard's visitors
    whose latest visit fell in ``generation``."""
    return f"{prefix()}{{vis:{shard}}}:gen:{generation}"


@family("{vis:<shard>}:seen:<partition>", "hash", MERGED)
def visitor_seen(shard: int, partition: int) -> str:
    """Hash: first visits as releases before generations kept them, by partition, without a TTL;
    nothing adds to it, the sweep moves its entries into the shard's current generation."""
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


# A visitor's link to the user they signed in as, and the visitor's current session (its pages, for
# a sign-in to move): both in the visitor's shard's tag, so the link and its first-visit entry are
# one script's keys. Named by the visitor id (32 hex digits), apart from users' keys: a user id may
# be 32 hex digits too (docs/visitors.md#signing-in).
VISITOR_LINK_DAYS = 365  # the visitor cookie's age (web.middleware.VISITOR_COOKIE_AGE)


@family("{vis:<shard>}:link:<visitor>", "string", fixed(lambda: VISITOR_LINK_DAYS * 86400))
def visitor_link(shard: int, visitor: str) -> str:
    """String: the user id the visitor signed in as, for as long as the visitor cookie lives."""
    return f"{prefix()}{{vis:{shard}}}:link:{visitor}"


@family("{vis:<shard>}:session:<visitor>", "list", fixed(lambda: conf.settings.SESSION_WINDOW))
def visitor_session(shard: int, visitor: str) -> str:
    """List: the visitor's current navigation session (entries as ``session``'s, in arrival order),
    the newest ``ACTIVITY_SESSION_MAX_PAGES`` kept, renewed by each page view: what a sign-in moves."""
    return f"{prefix()}{{vis:{shard}}}:session:{visitor}"


# --- people: the dense id map and the bitmaps it indexes (docs/key-schema.md) ------------------
# A person (any user id the API accepts) gets a small integer once, on their first event; every
# {au} bitmap and the first-day field are indexed by it, so memory follows people, not ids.


@family("{au}:ids", "hash", LONG_LIVED)
def dense_ids() -> str:
    """Hash: 12-byte digest of a user id -> the person's dense id (decimal, from 1): one entry per
    person seen, removed by an erase."""
    return f"{prefix()}{{au}}:ids"


@family("{au}:ids:next", "string", LONG_LIVED)
def dense_ids_next() -> str:
    """String counter: the last dense id assigned (INCR); ids are never reused."""
    return f"{prefix()}{{au}}:ids:next"


@family("{au}:people:day:<day>", "string", DATED)
def active_bits(day: str) -> str:
    """Bitmap: bit N set when the person with dense id N was active on ``day``."""
    return f"{prefix()}{{au}}:people:day:{day}"


@family("{au}:people:week:<week>", "string", DATED)
def active_bits_week(week: str) -> str:
    """Bitmap: bit N set when the person with dense id N was active in ISO ``week``."""
    return f"{prefix()}{{au}}:people:week:{week}"


@family("{au}:people:month:<month>", "string", DATED)
def active_bits_month(month: str) -> str:
    """Bitmap: bit N set when the person with dense id N was active in ``month``."""
    return f"{prefix()}{{au}}:people:month:{month}"


# --- group membership bitmaps: tagged {au}, so one script ANDs them with the active-user bitmaps --
# Not {grp}: a script's keys share one slot, and the day's, week's and month's bitmaps are {au}.


@family("{au}:members:<group_id>", "string", LONG_LIVED)
def group_members(group_id: int) -> str:
    """Bitmap: bit N set when the person with dense id N is a member of the group (the database's
    membership, mirrored when it changes; ``activity_backfill`` rebuilds it)."""
    return f"{prefix()}{{au}}:members:{group_id}"


@family("{au}:group-and", "string", DELETE)
def group_active_scratch() -> str:
    """Bitmap: a group's bitmap AND a period's, written and deleted inside one script call."""
    return f"{prefix()}{{au}}:group-and"


# --- navigation sessions and page-view statistics: two tags, {ses} and {pv} ---------------------
# A page-view script writes users' keys together with the shared per-day keys, so each family of
# them shares one tag: the sessions with what is counted from them ({ses}: sessions started,
# transitions, the recommendations read from both), the viewers with the reports ({pv}: the
# reports' SORT BY/GET reads per-user keys, which a Cluster allows only in the sorted key's slot).
# The page counts, which no script writes with a user's key, are spread by path (below).
# Page statistics live PAGE_STATS_DAYS (a week's 7 more) from the write that gives them their TTL,
# and the sweep gives that to one found without (the week's, the longer, to keys of either period).

SESSIONS_TAG = "{ses}"
PV_TAG = "{pv}"


@family("{ses}:session:<user>", "list", fixed(lambda: conf.settings.SESSION_WINDOW))
def session(user: str) -> str:
    """List: the user's current navigation session, sorted by ts, oldest page first, renewed by
    each view it takes; an entry is ``store.sessions.entry``'s ``<ts> <path>``."""
    return f"{prefix()}{SESSIONS_TAG}:session:{user}"


@family("{ses}:linked:<user>", "zset", fixed(lambda: VISITOR_LINK_DAYS * 86400))
def linked_visitors(user: str) -> str:
    """Sorted set: the visitor ids that signed in as the user -> when, the newest
    ``services.signin.MAX_LINKED`` kept, renewed by each sign-in: what an erase and an export find."""
    return f"{prefix()}{SESSIONS_TAG}:linked:{user}"


@family("{pv}:viewer:<user>", "hash", lifetimes.views_hash())
def viewer(user: str) -> str:
    """Hash: the user's page views per period (a field per period, named by it: ``d:YYYYMMDD``,
    ``w:YYYYWww``; only the periods the statistics keep), display name (field ``VIEWER_NAME``: the
    username, or the user id until one is known) and former display names (a field each,
    ``VIEWER_FORMER`` and the name: an erase finds the entries past periods' by-name indexes still
    hold under them). One key per viewer, not one per period."""
    return f"{prefix()}{PV_TAG}:viewer:{user}"


VIEWER_NAME = "name"
VIEWER_FORMER = "a:"  # the prefix of a former display name's field (lua/viewer_record.lua)


def viewer_pattern(field: str) -> str:
    """SORT BY/GET pattern over ``field`` of every user's ``viewer`` hash."""
    return f"{viewer('*')}->{field}"


@family("{ses}:started:<day>", "string", lifetimes.page_stats())
def sessions_started(day: str) -> str:
    """String counter: sessions started on ``day`` (YYYYMMDD, local)."""
    return f"{prefix()}{SESSIONS_TAG}:started:{day}"


# --- page counts: per partition of the path, {paths:<partition>} (sessions.PATH_PARTITIONS) ------
# A path's count lives in one partition, so a day's top paths are a merge of each partition's first
# ones and its page views a sum; a Cluster spreads the counting over the partitions' slots.


@family("{paths:<partition>}:views:<day>", "string", lifetimes.page_stats())
def page_views(partition: int, day: str) -> str:
    """String counter: page views on ``day`` of the paths of ``partition``."""
    return f"{prefix()}{{paths:{partition}}}:views:{day}"


@family("{paths:<partition>}:by-path:<day>", "zset", lifetimes.page_stats())
def path_views(partition: int, day: str) -> str:
    """Sorted set: path -> its page views on ``day``, for the paths of ``partition``; its share of
    ``sessions.MAX_PATHS_PER_DAY``, the most viewed, kept."""
    return f"{prefix()}{{paths:{partition}}}:by-path:{day}"


@family("{paths:<partition>}:folded:<day>", "string", lifetimes.page_stats())
def page_counts_folded(partition: int, day: str) -> str:
    """String: marks that ``activity_upgrade`` folded an earlier release's counts of ``day`` (its
    ``former_page_views`` and ``former_path_views``) into ``partition``, so a run again folds none twice."""
    return f"{prefix()}{{paths:{partition}}}:folded:{day}"


# What releases before the path partitions counted under {pv}: ``activity_upgrade`` folds them in.
@family("{pv}:views:<day>", "string", lifetimes.page_stats())
def former_page_views(day: str) -> str:
    """String counter: page views on ``day``, as releases before the path partitions kept them."""
    return f"{prefix()}{PV_TAG}:views:{day}"


@family("{pv}:paths:<day>", "zset", lifetimes.page_stats())
def former_path_views(day: str) -> str:
    """Sorted set: path -> its page views on ``day``, as releases before the path partitions kept them."""
    return f"{prefix()}{PV_TAG}:paths:{day}"


def former_page_counts_pattern() -> str:
    """SCAN MATCH pattern of the ``former_page_views`` keys: one a day an earlier release counted."""
    return match_pattern(former_page_views("*"))


def former_page_counts_day(key: str) -> str:
    """The day (YYYYMMDD) of a key ``former_page_counts_pattern`` found."""
    return key.removeprefix(f"{prefix()}{PV_TAG}:views:")


# A day's transitions are two sorted sets of the same "page NUL next page" members: one counts each
# step, the other (scores 0) finds a page's steps by one ZRANGEBYLEX. Two keys a day, not one a page:
# a script can declare them, and keys do not grow with the paths. Members are capped per page and day.
@family("{ses}:next:<day>", "zset", lifetimes.page_stats())
def transitions(day: str) -> str:
    """Sorted set: "page NUL next page" -> how often one followed the other in a session on ``day``,
    each page's ``sessions.MAX_NEXT_PAGES`` and the day's ``sessions.MAX_TRANSITIONS_PER_DAY`` most frequent kept."""
    return f"{prefix()}{SESSIONS_TAG}:next:{day}"


@family("{ses}:next-index:<day>", "zset", lifetimes.page_stats())
def transitions_index(day: str) -> str:
    """Sorted set, every score 0: the members of ``transitions(day)``, so a page's steps are one
    ``ZRANGEBYLEX [page NUL (page \\x01``."""
    return f"{prefix()}{SESSIONS_TAG}:next-index:{day}"


# Written and deleted inside one call of lua/transitions_count.lua.
@family("{ses}:next-trim", "zset", DELETE)
def transitions_trim_scratch() -> str:
    """A page's steps scored by their counts, to find the least frequent when the page is trimmed."""
    return f"{prefix()}{SESSIONS_TAG}:next-trim"


@family("{ses}:steps:<day>", "list", lifetimes.page_stats())
def transition_steps(day: str) -> str:
    """List: the steps of ``day`` a session script queued and ``lua/transitions_count.lua`` has not
    counted yet ("+page NUL next page" to count, "-..." to take back), counted in the same pipeline."""
    return f"{prefix()}{SESSIONS_TAG}:steps:{day}"


@family("{ses}:next-cdf:<window>:<path>", "zset", DELETE)
def transitions_cdf(window: str, path: str) -> str:
    """Sorted set: the pages that followed ``path`` over ``window`` (last day + days), scored by the
    running sum of their counts, for weighted picks by ZRANGEBYSCORE."""
    return f"{prefix()}{SESSIONS_TAG}:next-cdf:{window}:{path}"


@family("{ses}:next-total:<window>:<path>", "string", DELETE)
def transitions_total(window: str, path: str) -> str:
    """String: the sum of the counts in ``transitions_cdf``; it also marks a built copy, even an empty one."""
    return f"{prefix()}{SESSIONS_TAG}:next-total:{window}:{path}"


@family("{ses}:recs:<user>", "string", DELETE)
def recommendations(user: str) -> str:
    """String: the user's recommendations as last computed, after the fingerprint of the session
    and window they were computed for."""
    return f"{prefix()}{SESSIONS_TAG}:recs:{user}"


# What releases before the {ses} tag kept under {pv}, which ``activity_upgrade`` moves into {ses}.
def former_session_pattern(kind: str) -> str:
    """SCAN MATCH pattern of the keys of ``kind`` (``session``, ``linked``, ``started``, ``next``,
    ``next-index``: the part after the tag) kept under {pv}."""
    return match_pattern(f"{prefix()}{PV_TAG}:{kind}:*")


def moved_session_key(former: str) -> str:
    """The {ses} key this release keeps for ``former``, a key ``former_session_pattern`` found."""
    return f"{prefix()}{SESSIONS_TAG}:" + former.removeprefix(f"{prefix()}{PV_TAG}:")


@family("{ses}:moved:<key>", "string", DELETE)
def session_key_moved(key: str) -> str:
    """String: marks that the former key of ``key`` (a {ses} key, as ``moved_session_key`` names it)
    was moved into it, for as long as the former key would have lived."""
    return f"{prefix()}{SESSIONS_TAG}:moved:" + key.removeprefix(f"{prefix()}{SESSIONS_TAG}:")


# Written and deleted inside one call of lua/session_key_move.lua: a sorted set, or a string counter.
@family("{ses}:moving", "zset", DELETE)
def session_move_scratch() -> str:
    """A former key restored for a merge into the key this release keeps."""
    return f"{prefix()}{SESSIONS_TAG}:moving"


@family("{pv}:aliases:<user>", "set", lifetimes.page_stats(weekly=True))
def former_display_aliases(user: str) -> str:
    """Set: the user's former display names, as releases before the ``viewer`` hash's
    ``VIEWER_FORMER`` fields kept them; an erase and an export still read it until it expires."""
    return f"{prefix()}{PV_TAG}:aliases:{user}"


# An earlier release's per-user keys, which ``activity_upgrade`` folds into ``viewer``.
@family("{pv}:name:<user>", "string", lifetimes.page_stats(weekly=True))
def former_display_name(user: str) -> str:
    """String: the user's display name, as releases before the ``viewer`` hash kept it."""
    return f"{prefix()}{PV_TAG}:name:{user}"


@family("{pv}:uv:<period>:<user>", "string", lifetimes.page_stats(weekly=True))
def former_user_views(period: str, user: str) -> str:
    """String counter: one user's page views in ``period``, as releases before the ``viewer``
    hash kept them."""
    return f"{prefix()}{PV_TAG}:uv:{period}:{user}"


def former_viewer_patterns() -> tuple[str, str]:
    """SCAN MATCH patterns of ``former_display_name`` and ``former_user_views`` keys."""
    return match_pattern(former_display_name("*")), match_pattern(former_user_views("*", "*"))


def former_viewer_parts(key: str) -> tuple[str, str]:
    """(user id, ``viewer`` field) of a ``former_display_name`` or ``former_user_views`` key: the
    period is two parts (``d:YYYYMMDD``), so a user id may hold ":"."""
    kind, _, rest = key.removeprefix(f"{prefix()}{PV_TAG}:").partition(":")
    if kind == "name":
        return rest, VIEWER_NAME
    letter, period, user = rest.split(":", 2)
    return user, f"{letter}:{period}"


@family("{pv}:top:<period>", "zset", lifetimes.page_stats(weekly=True))
def top_viewers(period: str) -> str:
    """Sorted set: user id -> page views in ``period`` of the ``sessions.CANDIDATES`` users with the
    most (ties: the greater id, as SORT ... DESC), from which ``most-active`` is built."""
    return f"{prefix()}{PV_TAG}:top:{period}"


# The display name never holds a NUL (Django usernames and user ids cannot), so "name NUL user"
# sorts by name, then by user id, byte by byte.
NAME_SEPARATOR = "\0"


@family("{pv}:byname:<period>", "zset", lifetimes.page_stats(weekly=True))
def viewers_by_name(period: str) -> str:
    """Sorted set, every score 0: "name NUL user id" of each user with page views in ``period``
    (once merged from the pending set), which ``active-by-name`` pages by rank."""
    return f"{prefix()}{PV_TAG}:byname:{period}"


# Not ``byname:<period>:pending``: the index's ``<period>`` would match that name too, and each key
# belongs to exactly one family.
@family("{pv}:byname-pending:<period>", "set", lifetimes.page_stats(weekly=True))
def viewers_by_name_pending(period: str) -> str:
    """Set: "name NUL user id" entries of ``period`` not yet merged into ``viewers_by_name``.

    An SADD at a user's first view is O(1) where an ordered insert is O(log N); reads and the refresh
    job merge a bounded slice per call. The empty string marks a set that has its TTL.
    """
    return f"{prefix()}{PV_TAG}:byname-pending:{period}"


# The idempotency record of an ingest call (``activity.store.idempotency``). Always written with a TTL.
@family("{pv}:idem:<digest>", "hash", DELETE)
def idempotency(digest: str) -> str:
    """Hash: the claim, lease and answer of one caller's ``Idempotency-Key`` (or one task id),
    ``digest`` naming both; kept 24 h."""
    return f"{prefix()}{PV_TAG}:idem:{digest}"


# One per slot a fenced batch writes page views in, beside the scripts that read and set it in the
# same step as their writes (``lua/fence.lua``). Always written with a TTL, the record's.
@family("{<tag>}:writer:<digest>", "string", DELETE)
def batch_writer(tag: str, digest: str) -> str:
    """String: the token of the attempt of record ``digest`` that wrote its page views in the
    ``{tag}`` slot."""
    return f"{prefix()}{{{tag}}}:writer:{digest}"


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


# --- group views: each group's view, builds and epoch tagged by the group, {grp:<group_id>}, so one
# Lua call or MULTI may touch them and a Cluster spreads the groups; the user -> groups index, read
# by every event's batch, spread over {grp-index:<partition>} as last seen is. Apart from {ls}: a
# build reads last seen in its own round trip. A key found without a TTL is a leftover; deleting it
# is safe, as the next read rebuilds the view.


@family("{grp:<group_id>}:view", "zset", DELETE)
def group_view(group_id: int) -> str:
    """Sorted set: member of the group -> last seen (-1: never seen)."""
    return f"{prefix()}{{grp:{group_id}}}:view"


@family("{grp:<group_id>}:build:<token>", "zset", DELETE)
def group_view_build(group_id: int, token: str) -> str:
    """Sorted set: a view being built, RENAMEd over the view when complete."""
    return f"{prefix()}{{grp:{group_id}}}:build:{token}"


@family("{grp:<group_id>}:epoch", "string", DELETE)
def group_epoch(group_id: int) -> str:
    """String counter bumped on each membership change, so a build that raced one is discarded."""
    return f"{prefix()}{{grp:{group_id}}}:epoch"


@family("{grp-index:<partition>}:user-groups", "hash", DELETE)
def user_groups(partition: int) -> str:
    """Hash: user of the partition (``store.groups.index_key``) -> the comma-separated ids of
    their groups whose views were built, so an event finds the views to update
    (``lua/group_index_edit.lua``); absent while no view lists one of its users."""
    return f"{prefix()}{{grp-index:{partition}}}:user-groups"


# --- retention cohorts (docs/cohorts.md): tagged {au}, so a BITOP reads cohorts and active users
# in one slot. Cohort bitmaps outlive the active ones: a 26-week table still reads its cohorts when
# the rollup stores the cells of a week about to leave the active bitmaps' retention.


@family("{au}:first-days", "string", LONG_LIVED)
def first_day() -> str:
    """String, a BITFIELD of u16: at offset 16 x dense id, the day number of the person's first
    activity (0: none known)."""
    return f"{prefix()}{{au}}:first-days"


@family("{au}:firsts:day:<day>", "string", COHORT)
def first_active(day: str) -> str:
    """Bitmap: bit N set when the person with dense id N was first active on ``day`` (YYYYMMDD)."""
    return f"{prefix()}{{au}}:firsts:day:{day}"


@family("{au}:moves:day:<day>", "string", COHORT)
def first_moved(day: str) -> str:
    """Bitmap: bit N set when a late event made ``day`` the first day of person N in place of a later
    one, whose first-active bitmap still holds the bit (cohort reads leave the person out there)."""
    return f"{prefix()}{{au}}:moves:day:{day}"


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


# --- funnels (docs/funnels.md): a person's progress and the counts it adds to share the person's
# partition's tag {fn:<partition>} (``store.funnels.partition_of``, 16 fixed partitions), so one
# script call per partition advances a batch's people and a Cluster spreads the calls.


@family("{fn:<partition>}:states:<generation>", "hash", FUNNEL_GENERATION)
def funnel_states(partition: int, generation: int) -> str:
    """Hash: person (``u:<user>`` or ``v:<visitor>``) -> their progress in every funnel (JSON,
    ``store.funnel_progress``), for the partition's people whose latest write fell in ``generation``
    (``lifetimes.FUNNEL_STATES``: a state lives 62 to 93 days after its latest write)."""
    return f"{prefix()}{{fn:{partition}}}:states:{generation}"


# Releases before the generations kept each person's progress in a string of its own, with a TTL:
# ``activity_upgrade`` moves each into its partition's current generation.
@family("{fn:<partition>}:person:<person>", "string", DELETE)
def former_funnel_state(partition: int, person: str) -> str:
    """String: a person's progress as releases before the generations kept it."""
    return f"{prefix()}{{fn:{partition}}}:person:{person}"


def former_funnel_state_pattern() -> str:
    """SCAN MATCH pattern of the ``former_funnel_state`` keys."""
    return match_pattern(f"{prefix()}{{fn:*}}:person:*")


def former_funnel_state_parts(key: str) -> tuple[int, str]:
    """(partition, person) of a ``former_funnel_state`` key."""
    partition, _, person = key.removeprefix(f"{prefix()}{{fn:").partition("}:person:")
    return int(partition), person


@family("{fn:<partition>}:counts:<month>", "hash", DATED)
def funnel_counts(partition: int, month: str) -> str:
    """Hash: ``<funnel>:<period>:<step>`` -> the partition's people counted at that step of that
    funnel in that period (``d:YYYYMMDD``, ``w:YYYYWww``, ``m:YYYYMM``), for entries in ``month``;
    lives until the longest window and ``KEEP_DAYS`` have passed after the month."""
    return f"{prefix()}{{fn:{partition}}}:counts:{month}"


# --- pages now (docs/live.md): the online people's latest pages, under one tag {now}: a read ranks
# every page in one command. Each write gives the three keys the online window plus the future skew
# a ts may have, so once no view came for that long (everyone offline) they go whole.


def now_ttl() -> int:
    """Seconds the keys live after a view: the online window and the skew a view's ts may be ahead by."""
    return conf.settings.ONLINE_WINDOW + conf.settings.MAX_FUTURE_SKEW + 1


@family("{now}:latest", "zset", fixed(now_ttl))
def now_latest() -> str:
    """Sorted set: person (``u:<user>`` or ``v:<visitor>``) -> time of the person's latest page view,
    for the people not yet taken out as offline."""
    return f"{prefix()}{{now}}:latest"


@family("{now}:page", "hash", fixed(now_ttl))
def now_page() -> str:
    """Hash: person -> the path of the person's latest page view (the people of ``now_latest``)."""
    return f"{prefix()}{{now}}:page"


@family("{now}:people", "zset", fixed(now_ttl))
def now_people() -> str:
    """Sorted set: path -> minus the number of people in ``now_latest`` whose latest page it is."""
    return f"{prefix()}{{now}}:people"
