"""Who may call what (docs/api.md): each operation needs one of the app's named permissions
(``activity.permissions``), the same its admin counterpart needs; ``is_staff`` grants none. A
signed-in user reads their own last seen, session, recommendations and export without any."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from activity import permissions


class HasPermission(BasePermission):
    """Signed in with ``permission`` (a superuser has every one); with ``or_self``, also the user
    named in the URL (the ``user`` argument), checked first, so reading one's own data costs no query."""

    permission = ""
    or_self = False

    @property
    def message(self) -> str:
        if self.or_self:
            return f"Another user's activity needs the permission {self.permission}."
        return f"This needs the permission {self.permission}."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        if self.or_self and str(user.pk) == view.kwargs.get("user"):
            return True
        return user.has_perm(self.permission)


class CanView(HasPermission):
    permission = permissions.VIEW_ACTIVITY


class CanViewOrSelf(CanView):
    or_self = True


class CanExportOrSelf(HasPermission):
    permission = permissions.EXPORT_ACTIVITY
    or_self = True


class CanErase(HasPermission):
    permission = permissions.ERASE_ACTIVITY


class CanIngest(HasPermission):
    permission = permissions.INGEST_EVENTS


class CanDefineFunnels(HasPermission):
    permission = permissions.DEFINE_FUNNELS
