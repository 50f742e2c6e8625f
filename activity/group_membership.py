"""Keep group views in step with Django's group membership (both directions, clears, deletes).

Each change drops the affected views after the transaction commits (a rolled-back change drops
nothing, and a view rebuilt meanwhile cannot read the uncommitted membership). A Redis outage
here must not fail the admin's save: it is logged, and the views correct themselves at their TTL.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, pre_delete

from activity import groups
from activity.errors import StoreUnavailable

logger = logging.getLogger("activity.groups")


def _after_commit(group_ids: Iterable[int], removed: Iterable[tuple[int, str]]) -> None:
    group_ids, removed = list(group_ids), list(removed)

    def drop() -> None:
        try:
            groups.membership_changed(group_ids, removed)
        except StoreUnavailable as error:
            logger.warning(
                "Group views %s not dropped (Redis unavailable: %s); they expire at their TTL", group_ids, error
            )

    if group_ids:
        transaction.on_commit(drop)


def membership_changed(sender, instance, action, reverse, model, pk_set, **kwargs) -> None:
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


def user_deleted(sender, instance, **kwargs) -> None:
    """Deleting a user cascades its membership rows without m2m_changed: drop its groups' views."""
    group_ids = list(instance.groups.values_list("pk", flat=True))
    _after_commit(group_ids, [(group_id, str(instance.pk)) for group_id in group_ids])


def group_deleted(sender, instance, **kwargs) -> None:
    _after_commit([instance.pk], [])


def connect() -> None:
    user_model = get_user_model()
    m2m_changed.connect(membership_changed, sender=user_model.groups.through, dispatch_uid="activity.groups.m2m")
    pre_delete.connect(user_deleted, sender=user_model, dispatch_uid="activity.groups.user_deleted")
    post_delete.connect(group_deleted, sender=Group, dispatch_uid="activity.groups.group_deleted")
