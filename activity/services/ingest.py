"""Recording a batch of events: what the ingest API, the ``activity.record_events`` task and the
tracking middleware's batches call.

One batch is one Redis round trip: its last-seen updates, page views, visits, active users and
non-person traffic counts go in one pipeline, and only a last seen that moved reaches the group
views (``activity.services.groups``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from activity import clock, conf, metrics
from activity.calendar import day_of
from activity.errors import StoreUnavailable
from activity.events import Event
from activity.expiring import ExpiringCache
from activity.services import groups, traffic
from activity.services.sessions import page_path
from activity.store import actives as actives_store
from activity.store import groups as group_store
from activity.store import last_seen as last_seen_store
from activity.store import round_trip
from activity.store import sessions as sessions_store
from activity.store import traffic as traffic_store
from activity.store import visitors as visitors_store
from activity.store.client import get_client
from activity.store.daily import total
from activity.store.scripts import Pipeline
from activity.store.sessions import PageView

logger = logging.getLogger("activity.services.ingest")


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
    """Record a validated batch in one round trip: one EVALSHA for its last-seen updates (one per
    last-seen partition it touches), one for its page views (events with a path) and the
    visitor/active-user updates, one pipeline.

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

    The same round trip reads each user's group index; only when a last seen moved and one of
    its users belongs to a materialized group view does a second round trip update those views.
    """
    pipe = get_client().pipeline(transaction=False)
    finish = queue_record(pipe, events, visitors, names, kind, requests)
    return finish(pipe.execute() if len(pipe) else [])


# (user or visitor id, day) pairs this process wrote lately: who was active, and who visited, that
# day. Those writes are idempotent (a bit set, an HLL member, a first visit), so a repeat within
# ACTIVITY_DAY_WRITES_CACHE seconds is left out: a user's next page views cost only their last
# seen and session. A pair lost on the Redis side (a restart without persistence) is written again
# once its entry expires here.
_days_written: ExpiringCache[bool] = ExpiringCache(100_000)


def _written(pair: tuple[str, date]) -> bool:
    return conf.settings.DAY_WRITES_CACHE > 0 and _days_written.get(pair) is not None


def queue_record(
    pipe: Pipeline,
    events: Sequence[Event],
    visitors: Sequence[tuple[str, float]] = (),
    names: Mapping[str, str] | None = None,
    kind: str = traffic.PERSON,
    requests: int = 1,
) -> Callable[[list[Any]], RecordResult]:
    """``record_events``' commands queued on ``pipe``; call what it returns with the pipeline's
    replies to finish (group views) and get the result."""
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
        return lambda replies: RecordResult(accepted=0, last_seen_updated=0)
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
    anonymous: set[tuple[bytes, date]] = set()
    if people:
        actives = {pair for pair in {(event.user, day_of(event.ts)) for event in events} if not _written(pair)}
        user_visits = {(visitors_store.user_visitor_id(user), day) for user, day in actives}
        anonymous = {(visitor, day) for visitor, ts in visitors if not _written((visitor, day := day_of(ts)))}
        visits = {(bytes.fromhex(visitor), day) for visitor, day in anonymous}
        new_at = visitors_store.queue_visits(pipe, user_visits, visits, now, conf.settings.VISITOR_PARTITION_BITS)
        actives_store.queue_actives(pipe, actives, now, conf.settings.ACTIVE_BITMAP_MAX_ID)
    if kind != traffic.PERSON:
        traffic_store.queue_count(pipe, kind, day_of(now), now, requests)
    groups_at = group_store.queue_groups_of(pipe, latest)

    def finish(results: list[Any]) -> RecordResult:
        if conf.settings.DAY_WRITES_CACHE > 0:
            until = now + conf.settings.DAY_WRITES_CACHE
            for pair in (*actives, *anonymous):
                _days_written.put(pair, True, until)
        moved = total(results, moved_at)
        if moved:
            found = zip(latest, results[groups_at], strict=True)
            groups.propagate(latest, {user: ids for user, ids in found if ids})
        accepted = len(events) + len(visitors)
        metrics.EVENTS_ACCEPTED.inc(accepted)
        return RecordResult(
            accepted=accepted,
            last_seen_updated=moved,
            new_visitors=total(results, new_at),
            sessions_started=total(results, started_at),
        )

    return finish


@dataclass
class CallerActivity:
    """An API caller's own activity (last seen, active today), riding along with the request's
    round trip (``store.round_trip``) instead of a round trip of its own."""

    user: str
    name: str
    ts: float
    kind: str
    last_seen: bool = True  # False: this process moved it less than CALLER_SEEN_EVERY s ago
    needs_success: bool = True
    _finish: Callable[[list[Any]], RecordResult] | None = None

    def queue(self, pipe: Pipeline) -> None:
        events = [Event(user=self.user, ts=self.ts)] if self.last_seen else []
        self._finish = queue_record(pipe, events, names={self.user: self.name}, kind=self.kind)

    def arrived(self, replies: list[Any]) -> None:
        if self._finish is not None:
            self._finish(replies)
        if self.last_seen and conf.settings.CALLER_SEEN_EVERY > 0:
            _callers_seen.put((self.user, self.kind), True, self.ts + conf.settings.CALLER_SEEN_EVERY)


@contextmanager
def one_round_trip() -> Iterator[Callable[[bool], None]]:
    """Within the block (one API request), the throttle's count and the caller's activity ride
    along with the first thing sent to Redis (``store.round_trip``). Call what it yields at the end
    with whether the request succeeded: it sends what nothing took aboard (a caller's activity only
    on success). Redis failing then only loses that count or activity (logged): the answer stands."""

    def send_rest(succeeded: bool) -> None:
        try:
            round_trip.send_pending(get_client(), succeeded)
        except StoreUnavailable as error:
            logger.warning("throttle count and caller activity not recorded (%s)", error)

    with round_trip.collecting():
        yield send_rest


# API callers (user, kind) whose last seen this process moved lately. A client calling many times a second
# would otherwise send two scripts a request (last seen, group index) to move its last seen by
# milliseconds: it is moved at most once per ACTIVITY_CALLER_SEEN_EVERY seconds per process, and
# only after Redis took it (a failed trip is retried by the next request).
_callers_seen: ExpiringCache[bool] = ExpiringCache(10_000)


def record_caller(user: str, name: str, kind: str) -> None:
    """Record an API caller's own activity (``kind`` as ``traffic.classify`` says: a token's is a
    machine's, counted per request) with the request's round trip (sent now outside one)."""
    recent = conf.settings.CALLER_SEEN_EVERY > 0 and _callers_seen.get((user, kind)) is not None
    round_trip.ride(CallerActivity(user, name, clock.now(), kind, last_seen=not recent), get_client())
