"""What users look at next, from the page transitions of live sessions over the last ``WINDOW_DAYS``
days (docs/recommendations.md); each read is bounded by pages x days x next pages kept:

- ``for_user``: the pages most often next after the session's latest pages, by recency; cached per session;
- ``next_pages``: weighted random picks from a copy rebuilt by one client at a time (``services.cached``);
- ``top_next``: a day's most frequent next pages, for the dashboard.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from datetime import date, timedelta

from activity import clock
from activity.calendar import day_name, day_of
from activity.errors import UnknownPath
from activity.services import cached, reports
from activity.services.sessions import page_path
from activity.store import transitions as store
from activity.store.client import get_client

MAX_RESULTS = 50  # the largest ``n`` either read takes, and the rows a user's cached answer keeps
WINDOW_DAYS = 7  # days of transitions merged
RECENT_PAGES = 5  # the latest session pages recommendations start from
_random = random.Random()


def window_days(today: date) -> list[str]:
    """The day names merged: ``today`` first, then the ``WINDOW_DAYS`` - 1 before it."""
    return [day_name(today - timedelta(days=back)) for back in range(WINDOW_DAYS)]


def window_name(days: Sequence[str]) -> str:
    """How keys and fingerprints name a window: its last day and its length (``20261123+7``)."""
    return f"{days[0]}+{len(days)}"


def recency_weights(count: int) -> list[float]:
    """Weights of the ``count`` latest distinct pages, newest first: 1, 1/2, 1/3, ..., so the page
    being read counts most and older pages of a short session still count."""
    return [1 / (1 + rank) for rank in range(count)]


def for_user(user: str, n: int = 5) -> list[tuple[str, float]]:
    """The ``n`` best next pages for the user's live session as (path, score), best first; [] when
    there is no session or nothing followed its pages. Cached for this very session: one round trip
    when cached, three when computed."""
    days = window_days(day_of(clock.now()))
    recent_pages = RECENT_PAGES
    request = store.Recommending(
        user=user,
        context=f"{window_name(days)}:{recent_pages}",
        weights=recency_weights(recent_pages),
        day_names=days,
        ttl_ms=reports.Policy.current().ttl_ms,
        keep=MAX_RESULTS,
    )
    found = store.recommend(get_client(), request)
    return [] if found is None else found[:n]


def _pick_copy(path: str, days: Sequence[str], draws: int, rng: random.Random) -> cached.Copy[store.Picks]:
    """The cumulative-weight copy of ``path``'s next pages, read by drawing ``draws``. Reading raises
    ``UnknownPath`` when nothing followed the page, before any lock or build: a probe writes nothing."""
    policy, client = reports.Policy.current(), get_client()
    window = window_name(days)

    def read() -> store.Picks | None:
        found = store.pick(client, window, days, path, [rng.random() for _ in range(draws)])
        if found is not None and found.total == 0:
            raise UnknownPath(f"No page followed this path in the last {len(days)} days.")
        return found

    return cached.Copy(
        lock=f"next:{window}:{hashlib.sha1(path.encode()).hexdigest()}",  # bounded, whatever the path
        wait_s=policy.wait_s,
        stale_ms=policy.stale_ms,
        read=read,
        is_fresh=lambda picks: picks.pttl_ms > policy.stale_ms,
        pttl_ms=lambda: store.cdf_pttl_ms(client, window, path),
        build=lambda: store.build_cdf(client, window, days, path, policy.ttl_ms + policy.stale_ms),
    )


def next_pages(path: str, n: int, rng: random.Random | None = None) -> tuple[str, list[str], str]:
    """(the page as recorded, ``n`` distinct pages drawn by how often each followed it, cache state:
    hit, stale or miss); fewer when fewer pages followed it. The draws come from ``rng`` (seedable).
    One round trip on a hit. Raises ``UnknownPath`` when nothing followed the page in the window."""
    recorded = page_path(path)
    if recorded is None:
        raise UnknownPath("This path is never recorded as a page view (an excluded prefix).")
    days = window_days(day_of(clock.now()))
    picks, cache = cached.serve(_pick_copy(recorded, days, n, rng or _random))
    return recorded, picks.paths, cache


def top_next(day: date, paths: Sequence[str], n: int = 3) -> list[list[tuple[str, int]]]:
    """For each of ``paths``, its ``n`` most frequent next pages on ``day`` with their counts. One
    round trip."""
    return store.top_next(get_client(), day_name(day), paths, n)
