"""What the live stream sends (docs/live.md): the audience figures of ``GET /api/v1/stats/``, the
day's page views (the dashboard's live bar) and the top of pages now, in three round trips."""

from __future__ import annotations

from typing import Any

from activity.services import audience, pages_now, sessions

PAGES_NOW_SHOWN = 10


def snapshot() -> dict[str, Any]:
    """The body of a ``stats`` event."""
    stats = audience.stats()
    return {
        **stats.as_api(),
        "page_views": {"day": sessions.page_views(stats.day)},
        "pages_now": pages_now.top(PAGES_NOW_SHOWN),
    }
