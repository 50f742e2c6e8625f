"""Group views: members of a Django auth group, most recently seen first (service layer).

Reads page through a materialized view in Redis (one round trip once warm); last-seen updates
reach the views that exist (``propagate``, called by ``services.record_events``); membership
changes drop the affected views (``membership_changed``, called by activity.signals).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from activity import conf
from activity.store import groups as store
from activity.store import last_seen as last_seen_store
from activity.store.client import get_client

logger = logging.getLogger("activity.groups")

BUILD_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class MembersPage:
    group: int
    count: int
    rows: list[tuple[str, float | None]]  # (user, last seen or None for never seen)


def _rows(raw: Iterable[tuple[str, float]]) -> list[tuple[str, float | None]]:
    return [(user, None if score == store.NEVER else score) for user, score in raw]


def _members(group_id: int) -> list[str] | None:
    """The group's member ids from the database, or None when there is no such group."""
    members = [str(pk) for pk in get_user_model().objects.filter(groups__id=group_id).values_list("pk", flat=True)]
    if not members and not Group.objects.filter(pk=group_id).exists():
        return None
    return members


def members_page(group_id: int, offset: int, limit: int) -> MembersPage | None:
    """A page of a group's members, most recently seen first; None when the group does not exist.

    Warm: one round trip. Cold: the view is built (one query, one ZMSCORE, one MULTI) and then a
    catch-up ZMSCORE re-applies any last seen that moved while building, so the view is exact.
    """
    client = get_client()
    settings = conf.settings
    scores: dict[str, float | None] = {}
    for _ in range(BUILD_ATTEMPTS):
        count, rows, seen_epoch = store.read_page(client, group_id, offset, offset + limit - 1)
        if count:
            return MembersPage(group_id, count, _rows(rows))
        members = _members(group_id)
        if members is None:
            return None
        if not members:
            return MembersPage(group_id, 0, [])
        scores = last_seen_store.get_many(client, members)
        if store.build(client, group_id, scores, seen_epoch, settings.GROUP_VIEW_TTL):
            _catch_up(client, group_id, scores)
    # The view vanished again (a TTL shorter than a build) or membership kept changing: answer
    # from the last build's scores, in the view's order (score, then member, descending).
    ranked = sorted(((u, store.NEVER if s is None else s) for u, s in scores.items()), key=lambda r: (r[1], r[0]))
    ranked.reverse()
    return MembersPage(group_id, len(ranked), _rows(ranked[offset : offset + limit]))


def _catch_up(client, group_id: int, built: Mapping[str, float | None]) -> None:
    """Apply last seen that moved between the build's ZMSCORE and its publish (then the view missed it).

    An update whose last-seen write lands after this read also lands after the publish, so it
    finds the view and is applied by ``propagate``: together they leave nothing out.
    """
    now = last_seen_store.get_many(client, built)
    moved = {user: ts for user, ts in now.items() if ts is not None and ts != built[user]}
    if moved:
        settings = conf.settings
        store.upsert(client, {group_id: moved}, settings.GROUP_VIEW_STRATEGY, settings.GROUP_VIEW_TTL_MARGIN)


def propagate(latest: Mapping[str, float], groups_of: Mapping[str, Iterable[str]]) -> int:
    """Apply a batch's last seen to the views of its users' groups that exist (none is created).

    ``groups_of`` is each user's group index as read in the batch's own round trip. Scores are
    the batch's; ZADD GT keeps a view's score the maximum ever applied, which is the last seen.
    """
    updates: dict[int, dict[str, float]] = {}
    for user, group_ids in groups_of.items():
        for group_id in group_ids:
            updates.setdefault(int(group_id), {})[user] = latest[user]
    if not updates:
        return 0
    settings = conf.settings
    return store.upsert(get_client(), updates, settings.GROUP_VIEW_STRATEGY, settings.GROUP_VIEW_TTL_MARGIN)


def membership_changed(group_ids: Iterable[int], removed: Iterable[tuple[int, str]] = ()) -> None:
    """Drop the views of groups whose membership changed; the next read rebuilds them. One round trip."""
    store.drop(get_client(), group_ids, removed, conf.settings.GROUP_VIEW_TTL)
