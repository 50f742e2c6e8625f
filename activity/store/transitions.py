"""Page transitions and what is read from them: a user's recommendations, weighted random picks of
the pages that follow a page, and each page's most frequent next pages.

The page-view script (``lua/session_record.lua``) counts the transitions: per day and page, a
sorted set of the pages viewed next in the same session, capped at the most frequent. Every read
here is bounded by (pages read) x (days) x (next pages kept per page and day).
"""

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

NO_SESSION, ROWS = 0, 1  # the first element of a recommend.lua reply (2: missed, with the session)


@dataclass(frozen=True, slots=True)
class Recent:
    """What a user's recommendations are computed from, when none are cached for this session."""

    fingerprint: str  # of the session and context, so the computed rows can be cached for them
    paths: list[str]  # distinct pages of the session's latest entries, most recent first


@dataclass(frozen=True, slots=True)
class Picks:
    pttl_ms: int  # milliseconds the cumulative copy still lives
    total: int  # transitions counted in the copy (0: no page followed the page in the window)
    paths: list[str]  # the pages drawn, in draw order


def _rows(payload: str) -> list[tuple[str, float]]:
    return [(path, float(score)) for path, score in json.loads(payload)]


@dataclass(frozen=True, slots=True)
class Recommending:
    """One user's recommendation request, as both calls of ``lua/recommend.lua`` take it."""

    user: str
    context: str  # what besides the session the rows depend on (window, settings)
    recent_pages: int  # latest session entries the rows start from
    ttl_ms: int  # how long computed rows stay cached
    keep: int  # rows computed and cached

    def _call(
        self, client: Client, sets: Sequence[str] = (), fingerprint: str = "", weights: Sequence[float] = ()
    ) -> list:
        session_keys = [keys.session(self.user), keys.recommendations(self.user)]
        args = [self.context, self.recent_pages, self.ttl_ms, self.keep, fingerprint, *map(repr, weights)]
        return RECOMMEND(client, [*session_keys, *sets], args)

    def cached(self, client: Client) -> list[tuple[str, float]] | Recent | None:
        """The rows cached for the user's current session; else what computing them needs
        (``Recent``); None when the user has no live session. One EVALSHA."""
        reply = self._call(client)
        if reply[0] == NO_SESSION:
            return None
        if reply[0] == ROWS:
            return _rows(reply[1])
        paths: list[str] = []
        for entry in reversed(reply[2:]):
            path = json.loads(entry)["path"]
            if path not in paths:
                paths.append(path)
        return Recent(fingerprint=reply[1], paths=paths)

    def compute(
        self, client: Client, recent: Recent, weights: Sequence[float], day_names: Sequence[str]
    ) -> list[tuple[str, float]]:
        """The best ``keep`` next pages after ``recent``'s pages (weighted by ``weights``) over the
        days ``day_names``, pages of the session left out; cached when the session did not change
        since ``recent`` was read. One EVALSHA reading len(paths) x len(days) capped sets."""
        sets = [keys.transitions(day, path) for path in recent.paths for day in day_names]
        reply = self._call(client, sets, recent.fingerprint, weights)
        return [] if reply[0] == NO_SESSION else _rows(reply[1])


def build_cdf(client: Client, window: str, day_names: Sequence[str], path: str, keep_ms: int) -> int:
    """(Re)build the cumulative-weight copy of the pages that followed ``path`` on ``day_names``
    (named ``window``), living ``keep_ms``; returns its total. One EVALSHA."""
    cdf_keys = [keys.transitions_cdf(window, path), keys.transitions_total(window, path)]
    return NEXT_CDF(client, [*cdf_keys, *(keys.transitions(day, path) for day in day_names)], [keep_ms])


def pick(client: Client, window: str, day_names: Sequence[str], path: str, draws: Sequence[float]) -> Picks | None:
    """Distinct pages drawn from the copy, one per draw in [0, 1) while pages remain. None when no
    copy is built but some page followed ``path`` on ``day_names`` (build it); an empty ``Picks``
    (total 0) when none did: nothing to build. One EVALSHA: O(n log N)."""
    cdf_keys = [keys.transitions_cdf(window, path), keys.transitions_total(window, path)]
    day_keys = [keys.transitions(day, path) for day in day_names]
    reply = NEXT_PICK(client, [*cdf_keys, *day_keys], [repr(draw) for draw in draws])
    if reply[0] == -1:
        return None if reply[1] else Picks(pttl_ms=-1, total=0, paths=[])
    return Picks(pttl_ms=reply[0], total=reply[1], paths=reply[2:])


def cdf_pttl_ms(client: Client, window: str, path: str) -> int:
    """Milliseconds the cumulative copy still lives; negative when there is none."""
    return client.pttl(keys.transitions_total(window, path))


def top_next(client: Client, day_name: str, paths: Sequence[str], n: int) -> list[list[tuple[str, int]]]:
    """For each of ``paths``, its ``n`` most frequent next pages on the day with their counts, most
    frequent first. One pipeline of len(paths) ZRANGEs."""
    pipe = client.pipeline(transaction=False)
    for path in paths:
        pipe.zrange(keys.transitions(day_name, path), 0, n - 1, desc=True, withscores=True)
    return [[(page, int(count)) for page, count in rows] for rows in pipe.execute()]
