"""The funnels' admin page: staff define a funnel (steps one per line) or delete one; a funnel is
never edited, since its counts would mix two definitions. The list shows today's people at each step."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from activity import calendar, permissions
from activity.errors import StoreUnavailable
from activity.funnel_rules import MAX_STEPS
from activity.models import Funnel
from activity.services import funnels


class StepsField(forms.CharField):
    """The steps as lines of text, one path per line, in order."""

    widget = forms.Textarea(attrs={"rows": 6, "cols": 60})

    def prepare_value(self, value: Any) -> Any:
        return "\n".join(value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[str]:
        return [line.strip() for line in str(value or "").splitlines() if line.strip()]


class FunnelForm(forms.ModelForm):
    steps = StepsField(
        help_text=f"One path per line, 2 to {MAX_STEPS}; a path ending in * matches every path it begins."
    )

    class Meta:
        model = Funnel
        fields = ["name", "steps", "window", "mode"]

    def clean(self) -> dict[str, Any]:
        if self.instance.pk is None:
            try:
                funnels.check_room()
            except ValidationError as error:
                self.add_error(None, error)
        return super().clean()


@admin.register(Funnel)
class FunnelAdmin(admin.ModelAdmin):
    form = FunnelForm
    list_display = ["name", "mode", "window", "steps_shown", "today"]

    def get_readonly_fields(self, request: HttpRequest, obj: Funnel | None = None) -> list[str]:
        return ["name", "steps", "window", "mode", "created"] if obj is not None else []

    def has_view_permission(self, request: HttpRequest, obj: Funnel | None = None) -> bool:
        return request.user.has_perm(permissions.VIEW_ACTIVITY)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(permissions.DEFINE_FUNNELS)

    def has_change_permission(self, request: HttpRequest, obj: Funnel | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Funnel | None = None) -> bool:
        return request.user.has_perm(permissions.DEFINE_FUNNELS)

    def delete_model(self, request: HttpRequest, obj: Funnel) -> None:
        funnels.delete(obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for funnel in queryset:
            funnels.delete(funnel)

    @admin.display(description="steps")
    def steps_shown(self, obj: Funnel) -> str:
        return " → ".join(obj.steps)

    @admin.display(description="people today, by step")
    def today(self, obj: Funnel) -> str:
        try:
            found = funnels.report(obj, "day", calendar.today())
        except StoreUnavailable:
            return "Redis unavailable"
        return " → ".join(str(step["people"]) for step in found["steps"])
