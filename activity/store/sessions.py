"""Navigation sessions and page-view statistics: per batch, the session script, then per day it
declares the count of the page transitions it queued there, and per day of the batch the counts'
scripts (one per partition of the paths the day's views fall in) and the viewers'; the session's and
the viewers' in calls of at most ``PER_CALL`` views or users (the counts' takes no key per view), all
queued in the batch's one round trip; a session page read by one script (its count, TTL and rows at
one moment)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, timedelta

from activity import conf
from activity.calendar import day_name, day_of, midnight, period_name
from activity.store import keys, lifetimes, partitioning
from activity.store.client import PER_CALL, Client, Reply, Sum, chunks, scan_steps
from activity.store.idempotency import Fence, fence_part
from activity.store.scripts import LuaScript, Pipeline

SESSION_RECORD = LuaScript("session_record")
TRANSITIONS_COUNT = LuaScript("transitions_count")
PAGE_COUNTS = LuaScript("page_counts")
PAGE_COUNTS_FOLD = LuaScript("page_counts_fold")
VIEWER_RECORD = LuaScript("viewer_record")
VIEWER_FOLD = LuaScript("viewer_fold")
SESSION_KEY_MOVE = LuaScript("session_key_move")
PAGE = LuaScript("session_page")
# Distinct paths kept per day (each partition of the paths keeps its share), and next pages per page
# and day (the most viewed, or most frequent, survive), so a catch-all route or junk paths cannot
# grow them.
MAX_PATHS_PER_DAY = 10_000
PATH_PARTITIONS = 16  # hash tags {paths:<n>} a day's page counts are spread over
MAX_NEXT_PAGES = 50
# Users kept per day and week as the ranked reports' candidates (the top viewers).
CANDIDATES = 1000
# Distinct steps kept per day, whatever the pages, the least frequent trimmed once the slack is
# passed. The slack is not a tenth, as for paths: a trim removes each step from both sets, and
# trimming a tenth (5,000 steps) held one script call past the 5 ms target for any command.
MAX_TRANSITIONS_PER_DAY = 50_000
TRANSITIONS_PER_DAY_SLACK = 1_000
# Steps a view queues at most (a late view: one taken back, two counted): each day's count after a
# batch's session calls takes this many per view of them, so a queue drains as fast as it fills.
STEPS_PER_VIEW = 3


@dataclass(frozen=True, slots=True)
class PageView:
    user: str
    path: str
    ts: float
    name: str | None = None  # the username, when the caller knows it (the middleware does)


@dataclass(frozen=True, slots=True)
class SessionPage:
    count: int  # pages in the whole session
    expires_in: float  # seconds until the session ends unless the user views another page
    views: list[tuple[str, float]]  # (path, ts), most recent first


def entry(path: str, ts: float) -> str:
    """A session entry, as the lists hold it and ``lua/session_entry.lua`` reads it: the ts as
    ``repr`` writes it, a space, the path. Not JSON: 16 bytes less an entry, and no encoder per view."""
    return f"{ts!r} {path}"


def entry_view(row: str) -> tuple[str, float]:
    """(path, ts) of a session entry; ValueError for one that is not ours. Reads an earlier
    release's JSON entry too: a session open at the upgrade keeps them until it ends."""
    if row.startswith("{"):
        decoded = json.loads(row)
        path, ts = (decoded.get("path"), decoded.get("ts")) if isinstance(decoded, dict) else (None, None)
    else:
        stamp, space, path = row.partition(" ")
        ts = float(stamp) if space else None
    if not (isinstance(path, str) and isinstance(ts, int | float)):
        raise ValueError(f"not a session entry: {row!r}")
    return path, float(ts)


def paths_slack(max_paths: int) -> int:
    """New members a capped set takes past ``max_paths`` before a trim: a tenth, so each trim's
    removals are paid for by that many cheap views."""
    return max(max_paths // 10, 1)


def queue_record(
    pipe: Pipeline,
    views: Sequence[PageView],
    window_s: int,
    max_pages: int,
    stats_days: int,
    now: float,
    fence: Fence | None = None,
) -> Sum:
    """Queue the scripts recording the batch's views on ``pipe``: the sessions' for the batch (and
    the transitions' counts), then two per day the views fall on, each day's views in batch order;
    tombstoned users are skipped. Returns the sessions started, once the pipeline has run. With
    ``fence``, every script that records a view writes only if this attempt is the batch's writer
    (``store.idempotency``).

    Only views within the session window (``ts`` at or after ``now - window_s``) join sessions; older
    ones count in their day's statistics alone. Per day: counts per day and path (a call per
    partition of the paths), then per user (one step per user, whatever their views in the batch)
    views, display name, by-name entries and the top viewers.
    """
    by_day: dict[date, list[PageView]] = {}
    for view in views:
        by_day.setdefault(day_of(view.ts), []).append(view)
    day_ttl = lifetimes.page_stats_ttl(stats_days)
    ttls = (day_ttl, lifetimes.page_stats_ttl(stats_days, weekly=True), lifetimes.views_hash_ttl(stats_days))
    # Sorted by ts (stably: equal ones in batch order), so the script appends where it can; the
    # sessions and transitions it leaves do not depend on the order (tests/test_session_order.py).
    live = sorted((view for view in views if view.ts >= now - window_s), key=lambda view: view.ts)
    started = Sum()
    if live:
        days = session_days(window_s, now, live[-1].ts)
        fenced = fence_part(fence, "ses")
        started = Sum(
            _queue_sessions(pipe, fenced, chunk, days, window_s, max_pages, day_ttl, now)
            for chunk in chunks(live, PER_CALL)
        )
        if conf.settings.TRANSITIONS:
            for when in days:
                _queue_transitions(pipe, when, STEPS_PER_VIEW * len(live), day_ttl)
    fenced = fence_part(fence, "pv")
    for when in sorted(by_day):
        day_views = by_day[when]
        _queue_page_counts(pipe, fence, when, day_views, day_ttl, now)
        _queue_viewers(pipe, fenced, when, day_views, ttls, stats_days, now)
    return started


def session_days(window_s: int, now: float, latest: float) -> list[date]:
    """The days a view joining a session, or an entry after it, can fall on: from the day of
    ``now - window_s`` to that of ``now + ACTIVITY_MAX_FUTURE_SKEW`` (or of ``latest``, the batch's
    latest view, if later): one or two with the defaults."""
    first, last = day_of(now - window_s), day_of(max(now + conf.settings.MAX_FUTURE_SKEW, latest))
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


Fenced = tuple[list[str], list[str]]  # what lua/fence.lua takes before a script's own keys and arguments


def _queue_sessions(
    pipe: Pipeline,
    fenced: Fenced,
    views: Sequence[PageView],
    days: Sequence[date],
    window_s: int,
    max_pages: int,
    ttl: int,
    now: float,
) -> Reply:
    script_keys = [*fenced[0], keys.tombstones("ses")]
    for name in map(day_name, days):
        script_keys += [keys.sessions_started(name), keys.transition_steps(name)]
    args: list[str | int] = [*fenced[1], len(days), int(window_s * 1000), int(max_pages), ttl]
    args += [int(conf.settings.TRANSITIONS), repr(now)]
    args += [int(midnight(when).timestamp()) for when in days]
    args.append(int(midnight(days[-1] + timedelta(days=1)).timestamp()))
    for view in views:
        script_keys.append(keys.session(view.user))
        args += [view.user, entry(view.path, view.ts)]
    return pipe.script(SESSION_RECORD, script_keys, args)


def _queue_transitions(pipe: Pipeline, when: date, bound: int, ttl: int) -> None:
    """Queue the count of the steps the session calls queued on day ``when``, at most ``bound``.
    Not fenced: it counts what a session call queued, whichever attempt queued it."""
    name = day_name(when)
    script_keys = [keys.transition_steps(name), keys.transitions(name), keys.transitions_index(name)]
    script_keys.append(keys.transitions_trim_scratch())
    caps = [MAX_NEXT_PAGES, paths_slack(MAX_NEXT_PAGES), MAX_TRANSITIONS_PER_DAY, TRANSITIONS_PER_DAY_SLACK]
    pipe.script(TRANSITIONS_COUNT, script_keys, [ttl, *caps, bound])


def path_tag(partition: int) -> str:
    """The hash tag (without braces) of a partition of the paths: its tombstones' and writers' too."""
    return f"paths:{partition}"


def _queue_page_counts(
    pipe: Pipeline, fence: Fence | None, when: date, views: Sequence[PageView], ttl: int, now: float
) -> None:
    """One day's views, a call per partition of their paths, each taking its share of the day's cap."""
    day, max_paths = day_name(when), max(MAX_PATHS_PER_DAY // PATH_PARTITIONS, 1)
    by_partition: dict[int, list[PageView]] = {}
    for view in views:
        by_partition.setdefault(partitioning.partition_of(view.path, PATH_PARTITIONS), []).append(view)
    for partition, own in by_partition.items():
        tag = path_tag(partition)
        fenced = fence_part(fence, tag)
        script_keys = [*fenced[0], keys.tombstones(tag), keys.page_views(partition, day)]
        script_keys.append(keys.path_views(partition, day))
        args: list[str | int] = [*fenced[1], ttl, max_paths, paths_slack(max_paths), repr(now)]
        for view in own:
            args += [view.user, view.path]
        pipe.script(PAGE_COUNTS, script_keys, args)


def _queue_viewers(
    pipe: Pipeline,
    fenced: Fenced,
    when: date,
    views: Sequence[PageView],
    ttls: tuple[int, int, int],
    stats_days: int,
    now: float,
) -> None:
    """One day's views, a call per ``PER_CALL`` users: each user's views of the batch counted once (a
    user's last known username of the batch names them), in the day and its week."""
    day, week = period_name("day", when), period_name("week", when)
    day_keys = [*fenced[0], keys.tombstones("pv"), keys.top_viewers(day), keys.top_viewers(week)]
    day_keys += [keys.viewers_by_name(day), keys.viewers_by_name(week)]
    day_keys += [keys.viewers_by_name_pending(day), keys.viewers_by_name_pending(week)]
    oldest_day = period_name("day", when - timedelta(days=stats_days))
    oldest_week = period_name("week", when - timedelta(days=stats_days + 7))
    day_args: list[str | int] = [*fenced[1], day, week, oldest_day, oldest_week, *ttls, CANDIDATES, repr(now)]
    counts = Counter(view.user for view in views)
    names = {view.user: view.name for view in views if view.name}
    for users in chunks(counts, PER_CALL):
        script_keys, args = list(day_keys), list(day_args)
        for user in users:
            script_keys.append(keys.viewer(user))
            args += [user, counts[user], names.get(user, "")]
        pipe.script(VIEWER_RECORD, script_keys, args)


def page(client: Client, user: str, number: int, size: int) -> SessionPage | None:
    """Page ``number`` (1-based) of the session, most recent first: one script, so the count, the
    TTL and the rows describe the same list."""
    # Newest entries are on the right: page 1 is the last ``size`` entries, reversed. A start
    # before the head is clamped by Redis, so the last page holds just what remains.
    count, pttl, rows = PAGE(client, [keys.session(user)], [-number * size, -(number - 1) * size - 1])
    if count == 0:
        return None
    views = [entry_view(row) for row in reversed(rows)]
    return SessionPage(count=count, expires_in=max(pttl, 0) / 1000, views=views)


def day_counts(client: Client, day: date) -> tuple[int, int]:
    """(sessions started, page views) on ``day``; one round trip (a GET in {ses} and in each
    partition of the paths)."""
    name = day_name(day)
    pipe = client.pipeline(transaction=False)
    pipe.get(keys.sessions_started(name))
    started = pipe.reply()
    views = Sum()
    for partition in range(PATH_PARTITIONS):
        pipe.get(keys.page_views(partition, name))
        views.replies.append(pipe.reply())
    pipe.execute()
    return int(started.value or 0), views.value


def top_paths(client: Client, day: date, n: int) -> list[tuple[str, int]]:
    """The ``n`` most viewed paths on ``day``, most viewed first (ties: path descending). One round
    trip: each partition's first ``n``, merged (a path's count lives in one partition)."""
    pipe = client.pipeline(transaction=False)
    for partition in range(PATH_PARTITIONS):
        pipe.zrange(keys.path_views(partition, day_name(day)), 0, n - 1, desc=True, withscores=True)
    rows = [(int(score), path) for found in pipe.execute() for path, score in found]
    return [(path, views) for views, path in sorted(rows, reverse=True)[:n]]


def fold_former_viewers(client: Client, step: int, stats_days: int) -> Iterator[int]:
    """Fold an earlier release's per-user display names and view counters into the users' views
    hashes, ``step`` keys a SCAN step; yields how many each step folded. Safe to interrupt and to
    run again: a folded key is gone."""
    ttl = lifetimes.page_stats_ttl(stats_days, weekly=True)
    for pattern in keys.former_viewer_patterns():
        for found in scan_steps(client, pattern, step):
            pipe = client.pipeline(transaction=False)
            calls = []
            for key in found:
                user, field = keys.former_viewer_parts(key)
                calls.append(pipe.script(VIEWER_FOLD, [key, keys.viewer(user)], [field, ttl]))
            if calls:
                pipe.execute()
                yield sum(call.value for call in calls)


def fold_former_page_counts(client: Client, step: int) -> Iterator[int]:
    """Fold the days of page counts an earlier release kept under {pv} into the partitions of the
    paths, ``step`` days a SCAN step; yields how many days each step folded. Three round trips a
    day (read, fold, delete: on a Cluster the partitions are on every node). Safe to interrupt and to
    run again: a partition's marker makes its fold once, and the former keys go only after every
    partition has folded (a day met again after its fold is deleted, not counted twice)."""
    for found in scan_steps(client, keys.former_page_counts_pattern(), step):
        days = 0
        for day in map(keys.former_page_counts_day, found):
            views_key, paths_key = keys.former_page_views(day), keys.former_path_views(day)
            pipe = client.pipeline(transaction=False)
            pipe.get(views_key)
            pipe.pttl(views_key)
            pipe.zrange(paths_key, 0, -1, withscores=True)
            views, ttl_ms, rows = pipe.execute()
            if views is None:
                continue  # another run folded and deleted it meanwhile
            by_partition: dict[int, list[str | int]] = {partition: [] for partition in range(PATH_PARTITIONS)}
            for path, count in rows:
                by_partition[partitioning.partition_of(path, PATH_PARTITIONS)] += [int(count), path]
            ttl = max(ttl_ms // 1000, 1) if ttl_ms > 0 else lifetimes.page_stats_ttl(conf.settings.PAGE_STATS_DAYS)
            folds = []
            for partition, args in by_partition.items():
                script_keys = [keys.page_views(partition, day), keys.path_views(partition, day)]
                script_keys.append(keys.page_counts_folded(partition, day))
                added = int(views) if partition == 0 else 0  # the day's former total, in one partition
                folds.append(pipe.script(PAGE_COUNTS_FOLD, script_keys, [ttl, added, *args]))
            pipe.execute()
            client.delete(views_key, paths_key)  # one slot, {pv}
            days += any(fold.value for fold in folds)
        yield days


# The kinds of keys an earlier release kept under {pv} that move to {ses}, and how each merges into
# the key this release began meanwhile (lua/session_key_move.lua).
MOVE_HOW = {"session": "keep", "linked": "max", "started": "sum", "next": "sum", "next-index": "max"}


def move_former_sessions(client: Client, step: int, stats_days: int) -> Iterator[int]:
    """Move the sessions, linked visitors, sessions started and transitions an earlier release kept
    under {pv} into {ses}, ``step`` keys a SCAN step; yields how many each step moved. Three round
    trips a step (read, move, delete: on a Cluster the two tags are on two nodes). Safe to interrupt
    and to run again: a key is deleted only once moved, and a moved key is never merged twice."""
    default_ttl_ms = lifetimes.page_stats_ttl(stats_days, weekly=True) * 1000  # for one found without
    for kind, how in MOVE_HOW.items():
        for found in scan_steps(client, keys.former_session_pattern(kind), step):
            pipe = client.pipeline(transaction=False)
            read = []
            for former in found:
                pipe.dump(former)
                payload = pipe.reply()
                pipe.pttl(former)
                read.append((former, payload, pipe.reply()))
            pipe.execute()
            moving = [(former, payload.value, ttl.value) for former, payload, ttl in read if payload.value]
            moved = []
            for former, payload, ttl in moving:
                kept = keys.moved_session_key(former)
                script_keys = [kept, keys.session_key_moved(kept), keys.session_move_scratch()]
                args = [payload, ttl if ttl > 0 else default_ttl_ms, how]
                moved.append(pipe.script(SESSION_KEY_MOVE, script_keys, args))
            pipe.execute()
            for former, _, _ in moving:
                pipe.delete(former)
            pipe.execute()
            yield Sum(moved).value
