"""Who may do what (docs/api.md): staff everything, users their own data, ingest by permission."""

from rest_framework.permissions import BasePermission


class CanIngest(BasePermission):
    message = "Ingest needs a staff user or the permission activity.ingest_events."

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and (user.is_staff or user.has_perm("activity.ingest_events")))


class IsStaffOrSelf(BasePermission):
    """Staff read anyone's data; a user reads only their own (the ``user`` URL argument)."""

    message = "You may only read your own activity."

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        return user.is_staff or str(user.pk) == view.kwargs.get("user")
