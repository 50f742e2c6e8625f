"""Members of a Django auth group, most recently seen first, from a materialized view, and how many
of them were active today, this week or this month, from a membership bitmap (docs/groups.md).
Membership changes drop the views and set or clear the bitmaps' bits once they commit; a Redis
outage there is logged, not raised, so the admin's save never fails: the views correct themselves
at their TTL, the bitmaps at the next ``activity_backfill``."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models import Count, QuerySet
from django.db.models.signals import m2m_changed, post_delete, pre_delete

from activity import calendar, clock
from activity.errors import StoreUnavailable
from activity.store import groups as store
from activity.store import last_seen as last_seen_store
from activity.store.client import get_client

logger = logging.getLogger("activity.services.groups")

BUILD_ATTEMPTS = 3
VIEW_TTL = 300  # seconds a group view lives after its build
TOP_SCAN = 200  # groups the dashboard's "top groups" table looks at: the first by id
REBUILD_BATCH = 100  # groups per query and round trip of a membership-bitmap rebuild


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


def _after_commit(
    group_ids: Iterable[int],
    removed: Iterable[tuple[int, str]],
    added: Iterable[tuple[int, str]] = (),
    deleted: Iterable[int] = (),
) -> None:
    """Once the change commits: drop the groups' views, then mirror it into their membership bitmaps."""
    group_ids, removed, added, deleted = list(group_ids), list(removed), list(added), list(deleted)

    def drop() -> None:
        try:
            drop_views(group_ids, removed)
        except StoreUnavailable as error:
            logger.warning(
                "Group views %s not dropped (Redis unavailable: %s); they expire at their TTL", group_ids, error
            )
        try:
            store.write_members(get_client(), added, removed, deleted, clock.now())
        except StoreUnavailable as error:
            logger.warning(
                "Membership bitmaps of groups %s not updated (Redis unavailable: %s); run activity_backfill",
                group_ids,
                error,
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
    added = action == "post_add"
    _after_commit({group_id for group_id, _ in pairs}, [] if added else pairs, pairs if added else [])


def on_user_deleted(sender, instance, **kwargs) -> None:
    """Deleting a user cascades its membership rows without m2m_changed: drop its groups' views."""
    group_ids = list(instance.groups.values_list("pk", flat=True))
    _after_commit(group_ids, [(group_id, str(instance.pk)) for group_id in group_ids])


def on_group_deleted(sender, instance, **kwargs) -> None:
    _after_commit([instance.pk], [], deleted=[instance.pk])


# --- members active in a period ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ActiveMembers:
    group: int
    name: str
    period: str
    day: date  # the local day whose day, ISO week or month was counted
    active: int  # members active in the period (those whose ids have a bit: docs/groups.md)
    members: int  # every member, from the database

    def as_api(self) -> dict[str, object]:
        """The body of ``GET /api/v1/groups/<id>/active/`` (docs/api.md)."""
        return {
            "group": self.group,
            "period": self.period,
            "active": self.active,
            "members": self.members,
            "day": self.day.isoformat(),
        }


def _with_member_counts() -> QuerySet:
    """(id, name, member count) of each group, by id: one query, however many rows are taken."""
    return Group.objects.annotate(members=Count("user")).order_by("pk").values_list("pk", "name", "members")


def active_members(group_id: int, period: str) -> ActiveMembers | None:
    """Members of the group active in the current local ``period`` (``day``, ``week`` or ``month``),
    exact; None when there is no such group. One query and one round trip (one script call)."""
    found = _with_member_counts().filter(pk=group_id).first()
    if found is None:
        return None
    _, name, members = found
    day = calendar.today()
    (active,) = store.active_members(get_client(), [group_id], period, day)
    return ActiveMembers(group_id, name, period, day, active, members)


@dataclass(frozen=True, slots=True)
class TopGroups:
    rows: list[ActiveMembers]  # most active members today first (then most members, then lowest id)
    scanned: int  # groups looked at: the first ``TOP_SCAN`` by id
    more: bool  # whether groups beyond those exist (and were not looked at)


def top_active_today(limit: int = 10) -> TopGroups:
    """The groups with the most members active today among the first ``TOP_SCAN`` groups by id, those
    with none left out. Bounded whatever the number of groups: one query and one round trip of
    ``TOP_SCAN`` script calls, each bounded by the id space."""
    found = list(_with_member_counts()[: TOP_SCAN + 1])
    scanned = found[:TOP_SCAN]
    day = calendar.today()
    counts = store.active_members(get_client(), [pk for pk, _, _ in scanned], "day", day)
    rows = [
        ActiveMembers(pk, name, "day", day, active, members)
        for (pk, name, members), active in zip(scanned, counts, strict=True)
        if active
    ]
    rows.sort(key=lambda row: (-row.active, -row.members, row.group))
    return TopGroups(rows=rows[:limit], scanned=len(scanned), more=len(found) > TOP_SCAN)


@dataclass(frozen=True, slots=True)
class MembershipRebuild:
    groups: int
    bits: int  # memberships written (members whose ids have a bit)


def rebuild_memberships(batch_size: int = REBUILD_BATCH) -> MembershipRebuild:
    """Rebuild every group's membership bitmap from the database (``activity_backfill``): the groups
    keyset-paged by id, ``batch_size`` at a time (two queries and one round trip), each bitmap
    replaced by one SET. A change committed during a batch's read may be undone by its write: a
    rerun corrects it."""
    users = get_user_model()._default_manager
    groups = bits = 0
    after = 0
    while True:
        ids = list(Group.objects.filter(pk__gt=after).order_by("pk").values_list("pk", flat=True)[:batch_size])
        if not ids:
            return MembershipRebuild(groups=groups, bits=bits)
        members: dict[int, list[str]] = {group_id: [] for group_id in ids}
        # values_list reuses the filter's join: each row is a membership in one of ``ids``.
        for group_id, pk in users.filter(groups__in=ids).values_list("groups", "pk"):
            members[group_id].append(str(pk))
        bits += store.replace_members(get_client(), members, clock.now())
        groups += len(ids)
        after = ids[-1]


def connect_signals() -> None:
    user_model = get_user_model()
    m2m_changed.connect(on_membership_change, sender=user_model.groups.through, dispatch_uid="activity.groups.m2m")
    pre_delete.connect(on_user_deleted, sender=user_model, dispatch_uid="activity.groups.user_deleted")
    post_delete.connect(on_group_deleted, sender=Group, dispatch_uid="activity.groups.group_deleted")
