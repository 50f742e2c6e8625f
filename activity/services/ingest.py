"""Recording a batch of events: what the ingest API, the ``activity.record_events`` task and the
tracking middleware's batches call.

One batch is one Redis round trip: its last-seen updates, page views, visits, active users and
non-person traffic counts go in one pipeline, and only a last seen that moved reaches the group
views (``activity.services.groups``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from activity import clock, conf, metrics
from activity.calendar import day_of
from activity.events import Event
from activity.expiring import ExpiringCache
from activity.services import groups, traffic
from activity.services.sessions import page_path
from activity.store import audience as audience_store
from activity.store import groups as group_store
from activity.store import last_seen as last_seen_store
from activity.store import sessions as sessions_store
from activity.store.client import get_client, total
from activity.store.sessions import PageView


@dataclass(frozen=True, slots=True)
class RecordResult:
    accepted: int
    last_seen_updated: int
    new_visitors: int = 0
    sessions_started: int = 0


def record_events(
    events: Sequence[Event],
    visitors: Sequence[tuple[str, float]] = (),
    names: Mapping[str, str] | None = None,
    kind: str = traffic.PERSON,
    requests: int = 1,
) -> RecordResult:
    """Record a validated batch in one round trip: one pipeline of one EVALSHA for its last-seen
    updates (one per last-seen partition it touches), the page-view scripts for its events with a
    path, the visits and active users, and the read of its users' group indexes.

    ``visitors`` are anonymous visits, (visitor id as 32 hex digits, ts): they count as visitors
    (first visit, unique visitors) but are not users, so they never enter last seen or actives.
    Signed-in users' events count as visits of the user's own visitor id. ``names`` maps user ids
    to usernames where the caller knows them (the middleware does); the reports sort by them.
    ``kind`` is what ``activity.services.traffic.classify`` made of the request: a ``BOT``'s or a
    ``MACHINE``'s events move last seen only (a machine's count as a person's under
    ``ACTIVITY_COUNT_MACHINES``), and the ``requests`` they came in (the middleware's batches carry
    many) are counted in the day's figure of their kind.
    A page view dated more than ``ACTIVITY_PAGE_STATS_DAYS`` days back is not recorded as one (its
    statistics would already be gone), so per-period statistics exist only for periods an erase
    can name. Users erased and still tombstoned are skipped by the scripts.

    Only when a last seen moved and one of its users belongs to a materialized group view does a
    second round trip update those views.
    """
    people = kind == traffic.PERSON or (kind == traffic.MACHINE and conf.settings.COUNT_MACHINES)
    now = clock.now()
    oldest_view = day_of(now) - timedelta(days=conf.settings.PAGE_STATS_DAYS)
    latest: dict[str, float] = {}
    views: list[PageView] = []
    names = names or {}
    for event in events:
        ts = round(event.ts, 3)  # the API promises millisecond precision
        if ts > latest.get(event.user, -1.0):
            latest[event.user] = ts
        path = page_path(event.path) if people else None
        if path is not None and day_of(ts) >= oldest_view:
            views.append(PageView(user=event.user, path=path, ts=ts, name=names.get(event.user)))
    if not latest and not visitors and people:
        return RecordResult(accepted=0, last_seen_updated=0)

    pipe = get_client().pipeline(transaction=False)
    moved_at = last_seen_store.queue_update(pipe, latest, now) if latest else []
    started_at: list[int] = []
    if views:
        started_at = sessions_store.queue_record(
            pipe,
            views,
            conf.settings.SESSION_WINDOW,
            conf.settings.SESSION_MAX_PAGES,
            conf.settings.PAGE_STATS_DAYS,
            now,
        )
    new_at: list[int] = []
    actives: set[tuple[str, date]] = set()
    anonymous: set[tuple[str, date]] = set()
    if people:
        actives = {pair for pair in {(event.user, day_of(event.ts)) for event in events} if not _written(pair)}
        user_visits = {(audience_store.user_visitor_id(user), day) for user, day in actives}
        anonymous = {(visitor, day) for visitor, ts in visitors if not _written((visitor, day := day_of(ts)))}
        visits = {(bytes.fromhex(visitor), day) for visitor, day in anonymous}
        new_at = audience_store.queue_visits(pipe, user_visits, visits, now)
        audience_store.queue_actives(pipe, actives, now)
    if kind != traffic.PERSON:
        audience_store.queue_traffic(pipe, kind, day_of(now), now, requests)
    groups_at = group_store.queue_groups_of(pipe, latest)
    replies = pipe.execute()

    for pair in (*actives, *anonymous):
        _days_written.put(pair, True, now + DAY_WRITES_CACHE)
    moved = total(replies, moved_at)
    if moved:
        found = zip(latest, replies[groups_at], strict=True)
        groups.propagate(latest, {user: ids for user, ids in found if ids})
    accepted = len(events) + len(visitors)
    metrics.EVENTS_ACCEPTED.inc(accepted)
    return RecordResult(
        accepted=accepted,
        last_seen_updated=moved,
        new_visitors=total(replies, new_at),
        sessions_started=total(replies, started_at),
    )


# (user or visitor id, day) pairs this process wrote lately: who was active, and who visited, that
# day. Those writes are idempotent (a bit set, an HLL member, a first visit), so a repeat within
# DAY_WRITES_CACHE seconds is left out: a user's next page views cost only their last
# seen and session. A pair lost on the Redis side (a restart without persistence) is written again
# once its entry expires here.
DAY_WRITES_CACHE = 60
_days_written: ExpiringCache[bool] = ExpiringCache(100_000)


def _written(pair: tuple[str, date]) -> bool:
    return _days_written.get(pair) is not None
