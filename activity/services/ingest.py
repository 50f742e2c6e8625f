"""Recording a batch of events, for the ingest API, the ``activity.record_events`` task and the
middleware's batches: everything in one pipeline, one Redis round trip."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from activity import clock, conf, metrics
from activity.calendar import day_of
from activity.events import Event
from activity.expiring import ExpiringCache
from activity.services import funnels, groups, pages_now, signin, traffic
from activity.services.sessions import page_path
from activity.store import audience as audience_store
from activity.store import groups as group_store
from activity.store import last_seen as last_seen_store
from activity.store import sessions as sessions_store
from activity.store.client import Sum, get_client
from activity.store.idempotency import Fence
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
    fence: Fence | None = None,
    visitor_views: Sequence[tuple[str, float, str]] = (),
    day_writes: DayWrites | None = None,
) -> RecordResult:
    """Record a validated batch: one round trip, one more when funnels are defined and the batch has
    page views of people (their progress written back), and one when a last seen moved for a member
    of a built group view. Without ``fence`` a replay counts its page views again; with one (from
    ``services.idempotency``) they are written only by the attempt that holds it, and only once.

    ``visitors`` are anonymous visits (32-hex-digit id, ts): visitors, never users;
    ``visitor_views`` the page views among them (id, ts, path), which funnels and pages now take. ``names`` maps
    user ids to the usernames the reports sort by. ``kind`` is ``traffic.classify``'s: a bot's
    events, and a machine's unless ``ACTIVITY_COUNT_MACHINES``, only move last seen; either's
    ``requests`` count in the day's figure of its kind. A page view older than
    ``ACTIVITY_PAGE_STATS_DAYS`` is not recorded, so statistics exist only for periods an erase can name;
    one older than ``ACTIVITY_SESSION_WINDOW`` counts in its day's statistics but joins no session
    (a late one within it takes its place by ``ts``). With ``day_writes``, a person's day it holds
    (written lately by this process) is not written again: see ``DayWrites``.
    """
    people = kind == traffic.PERSON or (kind == traffic.MACHINE and conf.settings.COUNT_MACHINES)
    now = clock.now()
    oldest_view = day_of(now) - timedelta(days=conf.settings.PAGE_STATS_DAYS)
    latest: dict[str, float] = {}
    views: list[PageView] = []
    names = names or {}

    def viewed(raw: str | None, ts: float) -> str | None:
        """The path a page view at ``ts`` records, None for no page view recorded."""
        path = page_path(raw) if people else None
        return path if path is not None and day_of(ts) >= oldest_view else None

    for event in events:
        ts = round(event.ts, 3)  # the API promises millisecond precision
        if ts > latest.get(event.user, -1.0):
            latest[event.user] = ts
        if (path := viewed(event.path, ts)) is not None:
            views.append(PageView(user=event.user, path=path, ts=ts, name=names.get(event.user)))
    if not latest and not visitors and people:
        return RecordResult(accepted=0, last_seen_updated=0)

    pipe = get_client().pipeline(transaction=False)
    moved = last_seen_store.queue_update(pipe, latest, now)
    started = sessions_store.queue_record(
        pipe,
        views,
        conf.settings.SESSION_WINDOW,
        conf.settings.SESSION_MAX_PAGES,
        conf.settings.PAGE_STATS_DAYS,
        now,
        fence,
    )
    new = Sum()
    actives: set[tuple[str, date]] = set()
    anonymous: set[tuple[str, date]] = set()
    funnel_views: funnels.Pending | None = None
    if people:
        actives = {(event.user, day_of(event.ts)) for event in events}
        anonymous = {(visitor, day_of(ts)) for visitor, ts in visitors}
        if day_writes is not None:
            actives, anonymous = day_writes.unwritten(actives), day_writes.unwritten(anonymous)
        user_visits = {(audience_store.user_visitor_id(user), day) for user, day in actives}
        visits = {(bytes.fromhex(visitor), day) for visitor, day in anonymous}
        new = audience_store.queue_visits(pipe, user_visits, visits, now)
        audience_store.queue_actives(pipe, actives, now)
        person_views = [(funnels.user_person(view.user), view.ts, view.path) for view in views]
        visitor_pages = []
        for visitor, ts, raw in visitor_views:
            if (path := viewed(raw, ts := round(ts, 3))) is not None:
                person_views.append((funnels.visitor_person(visitor), ts, path))
                visitor_pages.append((visitor, ts, path))
        funnel_views = funnels.queue_views(pipe, person_views, now)
        pages_now.queue_views(pipe, person_views, now)
        signin.queue_visitor_views(pipe, visitor_pages, now)  # what a sign-in moves to the user
    if kind != traffic.PERSON:
        audience_store.queue_traffic(pipe, kind, day_of(now), now, requests)
    groups_of = group_store.GroupIndexes(pipe, latest)
    pipe.execute()

    if day_writes is not None:
        day_writes.add((*actives, *anonymous), now)
    funnels.advance(funnel_views, now)
    if moved.value:
        groups.propagate(latest, groups_of.grouped())
    accepted = len(events) + len(visitors)
    metrics.EVENTS_ACCEPTED.inc(accepted)
    return RecordResult(
        accepted=accepted,
        last_seen_updated=moved.value,
        new_visitors=new.value,
        sessions_started=started.value,
    )


DAY_WRITES_CACHE = 60  # seconds a DayWrites remembers a pair


class DayWrites:
    """The (user or visitor id, day) pairs a process wrote lately. Those writes are idempotent (a
    bit, an HLL member, a first visit), so a caller that passes this to ``record_events`` leaves a
    repeat within ``DAY_WRITES_CACHE`` seconds out: a user's next views cost only last seen and
    session. A pair Redis lost is written again once its entry expires. A call without one writes
    every pair."""

    def __init__(self, size: int = 100_000) -> None:
        self._pairs: ExpiringCache[bool] = ExpiringCache(size)

    def unwritten(self, pairs: set[tuple[str, date]]) -> set[tuple[str, date]]:
        return {pair for pair in pairs if self._pairs.get(pair) is None}

    def add(self, pairs: Iterable[tuple[str, date]], now: float) -> None:
        for pair in pairs:
            self._pairs.put(pair, True, now + DAY_WRITES_CACHE)

    def clear(self) -> None:
        """Forget every pair, so the next events write them again at once: for a process whose
        Redis was emptied under it (the tests' case)."""
        self._pairs.clear()


# The one the service's own callers share (the tracking batches, the ingest API, the task).
PROCESS_DAY_WRITES = DayWrites()
