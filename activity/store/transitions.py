"""Reads of the page transitions ``lua/session_record.lua`` counts (``keys.transitions``, two sets a
day): a user's recommendations, weighted random picks of next pages, each page's top next pages. A
window's days are read by one ``lua/next_top.lua`` call a day, all in one round trip, and summed
here, so each script names one day's two keys whatever the window. Every read is bounded by pages x
days x the next pages a page keeps a day."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from activity.store import keys, sessions
from activity.store.client import Client
from activity.store.scripts import LuaScript

NEXT_TOP = LuaScript("next_top")
NEXT_CDF = LuaScript("next_cdf")
NEXT_PICK = LuaScript("next_pick")

NO_COPY = -1  # the first element of a next_pick.lua reply when the copy is not built


@dataclass(frozen=True, slots=True)
class Picks:
    pttl_ms: int  # milliseconds the cumulative copy still lives
    total: int  # transitions counted in the copy (0: no page followed the page in the window)
    paths: list[str]  # the pages drawn, in draw order


@dataclass(frozen=True, slots=True)
class Recommending:
    """One user's recommendation request."""

    user: str
    context: str  # what besides the session the rows depend on (window, settings)
    weights: Sequence[float]  # of the latest distinct pages, newest first; one per latest entry read
    day_names: Sequence[str]  # the window's days
    ttl_ms: int  # how long computed rows stay cached
    keep: int  # rows computed and cached


def _day_keys(day_name: str) -> list[str]:
    """The day's transitions and transition index, as lua/next_top.lua takes them."""
    return [keys.transitions(day_name), keys.transitions_index(day_name)]


def _copy_keys(window: str, path: str) -> list[str]:
    """The cumulative copy of ``path``'s next pages over ``window`` and its total, as
    lua/next_cdf.lua and lua/next_pick.lua take them."""
    return [keys.transitions_cdf(window, path), keys.transitions_total(window, path)]


def _rows(reply: list[list[Any]]) -> list[list[tuple[str, int]]]:
    """lua/next_top.lua's reply: per page, its (next page, count) rows."""
    return [[(page, int(count)) for page, count in zip(rows[0::2], rows[1::2], strict=True)] for rows in reply]


def window_steps(client: Client, day_names: Sequence[str], paths: Sequence[str]) -> list[dict[str, int]]:
    """For each of ``paths``, how often each page followed it, summed over ``day_names``. One round
    trip: a call per day reading every next page the page keeps that day."""
    kept = sessions.MAX_NEXT_PAGES + sessions.paths_slack(sessions.MAX_NEXT_PAGES)
    pipe = client.pipeline(transaction=False)
    days = [pipe.script(NEXT_TOP, _day_keys(day), [kept, *paths]) for day in day_names]
    pipe.execute()
    summed: list[dict[str, int]] = [{} for _ in paths]
    for day in days:
        for counts, rows in zip(summed, _rows(day.value), strict=True):
            for page, count in rows:
                counts[page] = counts.get(page, 0) + count
    return summed


def _session_path(entry: str) -> str | None:
    """The path of a session entry; None for one that is not ours."""
    try:
        return sessions.entry_view(entry)[0]
    except ValueError:
        return None


def _best_first(row: tuple[str, float]) -> tuple[float, str]:
    """Highest score first; ties by path."""
    return -row[1], row[0]


def _scored(client: Client, request: Recommending, entries: Sequence[str]) -> list[list[str | float]]:
    """The best ``request.keep`` [path, score] rows for a session's ``entries`` (oldest first)."""
    pages: list[str] = []
    visited: set[str] = set()
    latest = len(entries) - len(request.weights)
    for at in range(len(entries) - 1, -1, -1):
        path = _session_path(entries[at])
        if path is not None:
            if at >= latest and path not in visited:
                pages.append(path)
            visited.add(path)
    scores: dict[str, float] = {}
    steps = window_steps(client, request.day_names, pages) if pages else []
    for rank, counts in enumerate(steps):
        weight, total = request.weights[rank], sum(counts.values())
        if total > 0:
            for page, count in counts.items():
                scores[page] = scores.get(page, 0) + weight * count / total
    ranked = sorted(((page, score) for page, score in scores.items() if page not in visited), key=_best_first)
    return [[page, score] for page, score in ranked[: request.keep]]


def recommend(client: Client, request: Recommending) -> list[tuple[str, float]] | None:
    """The best ``request.keep`` next pages for the user's live session as (path, score), best
    first, cached under the fingerprint of the session and ``request.context``; None without a live
    session. One round trip when cached; three when computed (the session, the window's days, the
    cache)."""
    pipe = client.pipeline(transaction=False)
    pipe.lrange(keys.session(request.user), 0, -1)
    entries = pipe.reply()
    pipe.get(keys.recommendations(request.user))
    cached = pipe.reply()
    pipe.execute()
    if not entries.value:
        return None
    fingerprint = hashlib.sha1("\n".join([request.context, *entries.value]).encode()).hexdigest()
    if cached.value and cached.value[:40] == fingerprint:
        rows = json.loads(cached.value[40:])
    else:
        rows = _scored(client, request, entries.value)
        client.set(keys.recommendations(request.user), fingerprint + json.dumps(rows), px=request.ttl_ms)
    return [(path, float(score)) for path, score in rows]


def build_cdf(client: Client, window: str, day_names: Sequence[str], path: str, keep_ms: int) -> int:
    """(Re)build the cumulative-weight copy of the pages that followed ``path`` on ``day_names``
    (named ``window``), living ``keep_ms``; returns its total. Two round trips: the window's days,
    then the copy replaced whole."""
    args: list[str | int] = [keep_ms]
    for page, count in window_steps(client, day_names, [path])[0].items():
        args += [count, page]
    return NEXT_CDF(client, _copy_keys(window, path), args)


def pick(client: Client, window: str, day_names: Sequence[str], path: str, draws: Sequence[float]) -> Picks | None:
    """Distinct pages drawn from the copy, one per draw in [0, 1) while pages remain. None: no copy
    but something to build; an empty ``Picks`` (total 0): nothing followed ``path``. One round trip
    when the copy is built; else a second reads the window's days."""
    reply = NEXT_PICK(client, _copy_keys(window, path), [repr(draw) for draw in draws])
    if reply[0] != NO_COPY:
        return Picks(pttl_ms=reply[0], total=reply[1], paths=reply[2:])
    return None if window_steps(client, day_names, [path])[0] else Picks(pttl_ms=-1, total=0, paths=[])


def cdf_pttl_ms(client: Client, window: str, path: str) -> int:
    """Milliseconds the cumulative copy still lives; negative when there is none."""
    return client.pttl(keys.transitions_total(window, path))


def top_next(client: Client, day_name: str, paths: Sequence[str], n: int) -> list[list[tuple[str, int]]]:
    """For each of ``paths``, its ``n`` most frequent next pages on the day with their counts, most
    frequent first (ties: the greater page first). One EVALSHA."""
    if not paths:
        return []
    return _rows(NEXT_TOP(client, _day_keys(day_name), [n, *paths]))
