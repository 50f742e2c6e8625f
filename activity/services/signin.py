"""Sign-in continues the visitor (docs/visitors.md#signing-in): while a browser is a visitor its
current session's pages are kept (a capped list per visitor, queued by ``services.ingest`` with the
batch); when it signs in, those pages become the start of the user's session, the visitor's funnel
progress continues as the user's, and the visitor is linked to the user, so a later signed-out visit
with the same cookie is not a new visitor. Erase and export reach the links (``services.privacy``)."""

from __future__ import annotations

from collections.abc import Sequence

from activity import clock, conf
from activity.services import funnels
from activity.store import signin as store
from activity.store.client import get_client
from activity.store.scripts import Pipeline
from activity.store.signin import Joined

MAX_LINKED = 20  # visitors (browsers) remembered per user, the oldest link dropped past it


def queue_visitor_views(pipe: Pipeline, views: Sequence[tuple[str, float, str]], now: float) -> None:
    """Queue the visitors' page views (visitor, ts, recorded path) into their current sessions: one
    script call per visitor of the batch, in the batch's round trip."""
    if views:
        store.queue_visitor_views(pipe, views, conf.settings.SESSION_WINDOW, conf.settings.SESSION_MAX_PAGES, now)


def continue_visitor(visitor: str, user: str) -> Joined:
    """``visitor`` (32 hex digits, from a verified cookie) signed in as ``user``: move the visitor's
    live session into the user's, merge the funnel progress and link the visitor to the user. Raises
    ``StoreUnavailable``."""
    return store.continue_visitor(
        get_client(),
        visitor,
        user,
        clock.now(),
        conf.settings.SESSION_WINDOW,
        conf.settings.SESSION_MAX_PAGES,
        conf.settings.PAGE_STATS_DAYS,
        MAX_LINKED,
        funnels.user_person(user),
        funnels.visitor_person(visitor),
    )


def linked(user: str) -> list[tuple[str, float]]:
    """(visitor id, when linked) of the visitors that signed in as ``user``, oldest first."""
    return store.linked(get_client(), user)


def linked_user(visitor: str) -> str | None:
    """The user ``visitor`` last signed in as, while the link lives (a year, as the cookie)."""
    return store.linked_user(get_client(), visitor)


def visitor_session(visitor: str) -> list[tuple[str, float]]:
    """The visitor's current session as (path, ts), oldest first; [] when none."""
    return store.visitor_session(get_client(), visitor)
