"""Members of a Django auth group, most recently seen first, from a materialized view (docs/groups.md).
Membership changes drop the views once they commit; a Redis outage there is logged, not raised, so
the admin's save never fails, and the views correct themselves at their TTL."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, pre_delete

from activity.errors import StoreUnavailable
from activity.store import groups as store
from activity.store import last_seen as last_seen_store
from activity.store.client import get_client

logger = logging.getLogger("activity.services.groups")

BUILD_ATTEMPTS = 3
VIEW_TTL = 300  # seconds a group view lives after its build


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
    """A page of a group's members, most recently seen first; None when there is no such group.
    Warm: one round trip. Cold: a build, then a catch-up read of what moved while building."""
    client = get_client()
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
        if store.build(client, group_id, scores, seen_epoch, VIEW_TTL):
            _catch_up(client, group_id, scores)
    # The view vanished again (a TTL shorter than a build) or membership kept changing: answer
    # from the last build's scores, in the view's order (score, then member, descending).
    ranked = sorted(((u, store.NEVER if s is None else s) for u, s in scores.items()), key=lambda r: (r[1], r[0]))
    ranked.reverse()
    return MembersPage(group_id, len(ranked), _rows(ranked[offset : offset + limit]))


def _catch_up(client, group_id: int, built: Mapping[str, float | None]) -> None:
    """Apply last seen that moved between the build's read and its publish: an update landing after
    this read also lands after the publish, so ``propagate`` applies it. Together nothing is missed."""
    now = last_seen_store.get_many(client, built)
    moved = {user: ts for user, ts in now.items() if ts is not None and ts != built[user]}
    if moved:
        store.upsert(client, {group_id: moved})


def propagate(latest: Mapping[str, float], groups_of: Mapping[str, Iterable[str]]) -> int:
    """Apply a batch's last seen to its users' views that exist (none is created); ``groups_of`` is
    each user's group index as read in the batch's round trip. ZADD GT never moves a score back."""
    updates: dict[int, dict[str, float]] = {}
    for user, group_ids in groups_of.items():
        for group_id in group_ids:
            updates.setdefault(int(group_id), {})[user] = latest[user]
    if not updates:
        return 0
    return store.upsert(get_client(), updates)


def drop_views(group_ids: Iterable[int], removed: Iterable[tuple[int, str]] = ()) -> None:
    """Drop the views of groups whose membership changed; the next read rebuilds them. One round trip."""
    store.drop(get_client(), group_ids, removed, VIEW_TTL)


def _after_commit(group_ids: Iterable[int], removed: Iterable[tuple[int, str]]) -> None:
    group_ids, removed = list(group_ids), list(removed)

    def drop() -> None:
        try:
            drop_views(group_ids, removed)
        except StoreUnavailable as error:
            logger.warning(
                "Group views %s not dropped (Redis unavailable: %s); they expire at their TTL", group_ids, error
            )

    if group_ids:
        transaction.on_commit(drop)


def on_membership_change(sender, instance, action, reverse, model, pk_set, **kwargs) -> None:
    """m2m_changed on User.groups: ``reverse`` means the change came from ``group.user_set``."""
    if action == "pre_clear":
        # pk_set is None on clear: remember who was there before the rows go.
        related = instance.user_set if reverse else instance.groups
        instance._activity_cleared = set(related.values_list("pk", flat=True))
        return
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    pks = instance.__dict__.pop("_activity_cleared", set()) if action == "post_clear" else pk_set or set()
    pairs = [(instance.pk, str(pk)) for pk in pks] if reverse else [(pk, str(instance.pk)) for pk in pks]
    _after_commit({group_id for group_id, _ in pairs}, pairs if action != "post_add" else [])


def on_user_deleted(sender, instance, **kwargs) -> None:
    """Deleting a user cascades its membership rows without m2m_changed: drop its groups' views."""
    group_ids = list(instance.groups.values_list("pk", flat=True))
    _after_commit(group_ids, [(group_id, str(instance.pk)) for group_id in group_ids])


def on_group_deleted(sender, instance, **kwargs) -> None:
    _after_commit([instance.pk], [])


def connect_signals() -> None:
    user_model = get_user_model()
    m2m_changed.connect(on_membership_change, sender=user_model.groups.through, dispatch_uid="activity.groups.m2m")
    pre_delete.connect(on_user_deleted, sender=user_model, dispatch_uid="activity.groups.user_deleted")
    post_delete.connect(on_group_deleted, sender=Group, dispatch_uid="activity.groups.group_deleted")
