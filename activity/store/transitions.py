"""Reads of the page transitions ``lua/session_record.lua`` counts (``keys.transitions``): a user's
recommendations, weighted random picks of next pages, each page's top next pages. Every read is
bounded by pages x days x next pages kept per page and day."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from activity.store import keys
from activity.store.client import Client
from activity.store.scripts import LuaScript

RECOMMEND = LuaScript("recommend")
NEXT_CDF = LuaScript("next_cdf")
NEXT_PICK = LuaScript("next_pick")
NEXT_TOP = LuaScript("next_top")

NO_SESSION = 0  # the first element of a recommend.lua reply (1: the rows follow)


@dataclass(frozen=True, slots=True)
class Picks:
    pttl_ms: int  # milliseconds the cumulative copy still lives
    total: int  # transitions counted in the copy (0: no page followed the page in the window)
    paths: list[str]  # the pages drawn, in draw order


@dataclass(frozen=True, slots=True)
class Recommending:
    """One user's recommendation request, as ``lua/recommend.lua`` takes it."""

    user: str
    context: str  # what besides the session the rows depend on (window, settings)
    weights: Sequence[float]  # of the latest distinct pages, newest first; one per latest entry read
    day_names: Sequence[str]  # the window's days
    ttl_ms: int  # how long computed rows stay cached
    keep: int  # rows computed and cached


def _day_sets(day_names: Sequence[str]) -> list[str]:
    """Each day's transitions and transition index, in the order the scripts take them."""
    return [key for day in day_names for key in (keys.transitions(day), keys.transitions_index(day))]


def recommend(client: Client, request: Recommending) -> list[tuple[str, float]] | None:
    """The best ``request.keep`` next pages for the user's live session as (path, score), best
    first, cached for this very session; None without a live session. One EVALSHA, computed or cached."""
    script_keys = [keys.session(request.user), keys.recommendations(request.user), *_day_sets(request.day_names)]
    args = [request.context, len(request.weights), request.ttl_ms, request.keep, *map(repr, request.weights)]
    reply = RECOMMEND(client, script_keys, args)
    if reply[0] == NO_SESSION:
        return None
    return [(path, float(score)) for path, score in json.loads(reply[1])]


def build_cdf(client: Client, window: str, day_names: Sequence[str], path: str, keep_ms: int) -> int:
    """(Re)build the cumulative-weight copy of the pages that followed ``path`` on ``day_names``
    (named ``window``), living ``keep_ms``; returns its total. One EVALSHA."""
    cdf_keys = [keys.transitions_cdf(window, path), keys.transitions_total(window, path)]
    return NEXT_CDF(client, [*cdf_keys, *_day_sets(day_names)], [path, keep_ms])


def pick(client: Client, window: str, day_names: Sequence[str], path: str, draws: Sequence[float]) -> Picks | None:
    """Distinct pages drawn from the copy, one per draw in [0, 1) while pages remain. None: no copy
    but something to build; an empty ``Picks`` (total 0): nothing followed ``path``. One EVALSHA."""
    cdf_keys = [keys.transitions_cdf(window, path), keys.transitions_total(window, path)]
    indexes = [keys.transitions_index(day) for day in day_names]
    reply = NEXT_PICK(client, [*cdf_keys, *indexes], [path, *(repr(draw) for draw in draws)])
    if reply[0] == -1:
        return None if reply[1] else Picks(pttl_ms=-1, total=0, paths=[])
    return Picks(pttl_ms=reply[0], total=reply[1], paths=reply[2:])


def cdf_pttl_ms(client: Client, window: str, path: str) -> int:
    """Milliseconds the cumulative copy still lives; negative when there is none."""
    return client.pttl(keys.transitions_total(window, path))


def top_next(client: Client, day_name: str, paths: Sequence[str], n: int) -> list[list[tuple[str, int]]]:
    """For each of ``paths``, its ``n`` most frequent next pages on the day with their counts, most
    frequent first (ties: the greater page first). One EVALSHA."""
    if not paths:
        return []
    reply = NEXT_TOP(client, [keys.transitions(day_name), keys.transitions_index(day_name)], [n, *paths])
    return [[(page, int(count)) for page, count in zip(rows[0::2], rows[1::2], strict=True)] for rows in reply]
