"""Navigation sessions and page-view statistics: what each user is browsing now, and each day's
pages. Page views are recorded with the rest of a batch (``services.ingest``)."""

from __future__ import annotations

from datetime import date

from activity import conf
from activity.store import sessions as store
from activity.store.client import get_client
from activity.store.sessions import SessionPage

KEEP_QUERY = False  # query strings often carry tokens, and would split one page's counts over many
EXCLUDE_PATHS = ("/admin/jsi18n/",)  # path prefixes never recorded as page views


def page_path(path: str | None) -> str | None:
    """The path a page view records, without its query string unless ``KEEP_QUERY``; None for no
    path or one under ``EXCLUDE_PATHS``."""
    if path is None:
        return None
    if not KEEP_QUERY:
        path = path.split("?", 1)[0]
    if path.startswith(EXCLUDE_PATHS):
        return None
    return path


def page(user: str, page: int = 1, page_size: int = 20) -> SessionPage | None:
    """One page of the user's live navigation session, most recent first; None when there is none.
    One round trip that reads only that page, never the whole list."""
    return store.page(get_client(), user, page, page_size)


def current(user: str) -> list[tuple[str, float]]:
    """Every page of the user's current session as (path, ts), most recent first; [] when none."""
    found = store.page(get_client(), user, 1, conf.settings.SESSION_MAX_PAGES)
    return [] if found is None else found.views


def started(day: date) -> int:
    """Navigation sessions started on ``day`` (local, ``activity.calendar``), while its statistics are kept."""
    return store.day_counts(get_client(), day)[0]


def page_views(day: date) -> int:
    """Page views recorded on ``day`` (local), while its statistics are kept."""
    return store.day_counts(get_client(), day)[1]


def top_paths(day: date, n: int = 10) -> list[tuple[str, int]]:
    """The ``n`` most viewed paths on ``day`` (local) with their view counts, most viewed first."""
    return store.top_paths(get_client(), day, n)


def upgrade(step: int = 1000) -> tuple[int, int, int]:
    """Fold the per-user display names and view counters of a release before the views hashes into
    them, move the sessions and what is counted from them of a release before the {ses} tag into it,
    and fold the page counts of a release before the path partitions into them, ``step`` keys a
    step; returns (keys folded, keys moved, days of page counts folded). Concurrent runs and writers
    are safe (each key folds or moves in one script); a run on this release's layout changes nothing."""
    client, days = get_client(), conf.settings.PAGE_STATS_DAYS
    folded = sum(store.fold_former_viewers(client, step, days))
    moved = sum(store.move_former_sessions(client, step, days))
    return folded, moved, sum(store.fold_former_page_counts(client, step))
