"""Pages now (docs/live.md): which pages the people online are on. Each person's latest page view
counts, users and cookie visitors alike (bots and machines never: ``services.ingest`` hands only
people's views), online as ``GET /api/v1/online/`` means it: within ``ACTIVITY_ONLINE_WINDOW``."""

from __future__ import annotations

from collections.abc import Sequence

from activity import clock, conf
from activity.store import pages_now as store
from activity.store.client import get_client
from activity.store.scripts import Pipeline

MAX_N = 100


def queue_views(pipe: Pipeline, views: Sequence[tuple[str, float, str]], now: float) -> None:
    """Queue people's page views, (person, ts, path), into the batch's pipeline."""
    store.queue_views(pipe, views, now - conf.settings.ONLINE_WINDOW, now)


def top(n: int = 10) -> list[dict[str, object]]:
    """The ``n`` pages the most people online are on, most first: ``[{"path", "people"}]``."""
    ranked = store.top(get_client(), clock.now() - conf.settings.ONLINE_WINDOW, n)
    return [{"path": path, "people": people} for path, people in ranked]
