"""A visitor who signs in (docs/visitors.md#signing-in): the visitor's current session as a capped
list (one script call per visitor and batch, queued on the batch's pipeline), and at the sign-in the
reads and writes that continue the visitor as the user: the pages join the user's session
(``lua/signin_join.lua``, {ses}), the visitor is linked to the user (``lua/visitor_link.lua``, the
visitor's {vis:N}), and the funnel progress is merged (``store.funnels.merge``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from activity import calendar
from activity.calendar import day_name
from activity.store import audience, funnels, keys, lifetimes, pages_now
from activity.store.client import Client, Reply
from activity.store.scripts import LuaScript, Pipeline
from activity.store.sessions import entry, entry_view

VISITOR_SESSION_RECORD = LuaScript("visitor_session_record")
SIGNIN_JOIN = LuaScript("signin_join")
VISITOR_LINK = LuaScript("visitor_link")
MERGE_TRIES = 3  # funnel merges tried while views for the user land between the read and the write


def _shard(visitor: str) -> int:
    return audience.shard_of(bytes.fromhex(visitor))


def queue_visitor_views(
    pipe: Pipeline, views: Sequence[tuple[str, float, str]], window_s: int, max_pages: int, now: float
) -> list[Reply]:
    """Queue one ``visitor_session_record`` call per visitor of ``views`` (visitor, ts, path) within
    the session window: the visitor's views in time order, the newest ``max_pages``."""
    by_visitor: dict[str, list[tuple[float, str]]] = {}
    for visitor, ts, path in views:
        if ts >= now - window_s:
            by_visitor.setdefault(visitor, []).append((ts, path))
    calls = []
    for visitor, own in by_visitor.items():
        own.sort(key=lambda view: view[0])
        entries = [entry(path, ts) for ts, path in own[-max_pages:]]
        key = keys.visitor_session(_shard(visitor), visitor)
        calls.append(pipe.script(VISITOR_SESSION_RECORD, [key], [int(window_s * 1000), int(max_pages), *entries]))
    return calls


@dataclass(frozen=True, slots=True)
class Joined:
    """What a sign-in did: the pages moved, the user's session length after, whether the visitor got
    a first visit, and the funnel merge's outcome (``funnels.merge``'s)."""

    pages: int
    session_length: int  # -1: the user is tombstoned (erased lately), nothing joined
    first_visit: bool
    funnels: str


def continue_visitor(
    client: Client,
    visitor: str,
    user: str,
    now: float,
    window_s: int,
    max_pages: int,
    stats_days: int,
    max_linked: int,
    user_person: str,
    visitor_person: str,
) -> Joined:
    """Continue ``visitor`` as ``user``: two round trips (the reads, then the writes), a third only
    when the funnel merge must read the user's state again. Not atomic across the tags: a visitor
    view landing between the read and the write stays the visitor's."""
    shard = _shard(visitor)
    session = keys.visitor_session(shard, visitor)
    pipe = client.pipeline(transaction=False)
    pipe.lrange(session, 0, -1)
    progress = funnels.queue_read(pipe, visitor_person, user_person, now)
    rows = pipe.execute()[0]
    pages = sorted(((entry_view(row)[1], n, row) for n, row in enumerate(rows)), key=lambda page: page[:2])
    if pages and pages[-1][0] < now - window_s:
        pages = []  # idle past the window by the service's clock: that session is over

    day = calendar.day_of(now)
    visitor_bytes = bytes.fromhex(visitor)
    hashes, tombstones = audience.visitor_home(visitor_bytes, day)
    generations = hashes[:-1]  # the legacy hash is the sweep's to merge
    pipe = client.pipeline(transaction=False)
    args: list[str | int] = [user, repr(now), visitor, int(window_s * 1000), int(max_pages)]
    args += [lifetimes.page_stats_ttl(stats_days), int(max_linked), keys.VISITOR_LINK_DAYS * 86400]
    args += [row for _, _, row in pages]
    join_keys = [keys.tombstones("ses"), keys.session(user), keys.sessions_started(day_name(day))]
    joined = pipe.script(SIGNIN_JOIN, [*join_keys, keys.linked_visitors(user)], args)
    link_args = [user, keys.VISITOR_LINK_DAYS * 86400, visitor_bytes, calendar.day_number(day), repr(now)]
    link_args.append(max(lifetimes.VISITORS.ttl(lifetimes.VISITORS.of(day), now), 1))
    linked = pipe.script(VISITOR_LINK, [keys.visitor_link(shard, visitor), tombstones, *generations], link_args)
    if rows:
        pipe.delete(session)
    merged = funnels.queue_merge(pipe, progress, now)
    pages_now.queue_forget(pipe, visitor_person)  # the user's next page view puts them there
    pipe.execute()
    if joined.value == -1:  # the user was erased lately: no link of theirs stays behind
        client.delete(keys.visitor_link(shard, visitor))
    outcome = merged.value
    for _ in range(MERGE_TRIES - 1):
        if outcome != "retry":
            break
        outcome = funnels.merge_again(client, progress, now)
    return Joined(pages=len(pages), session_length=joined.value, first_visit=linked.value == 1, funnels=outcome)


def linked(client: Client, user: str) -> list[tuple[str, float]]:
    """(visitor id, when linked) of the user's linked visitors, oldest first."""
    return [(visitor, when) for visitor, when in client.zrange(keys.linked_visitors(user), 0, -1, withscores=True)]


def linked_user(client: Client, visitor: str) -> str | None:
    """The user ``visitor`` last signed in as, while the link lives."""
    return client.get(keys.visitor_link(_shard(visitor), visitor))


def visitor_session(client: Client, visitor: str) -> list[tuple[str, float]]:
    """The visitor's current session as (path, ts), in arrival order (oldest first)."""
    rows = client.lrange(keys.visitor_session(_shard(visitor), visitor), 0, -1)
    return [entry_view(row) for row in rows]
