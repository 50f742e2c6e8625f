"""The activity dashboard: a ModelAdmin of the ``Dashboard`` proxy model, so it lives in the site's
own admin, behind ``admin_view`` (staff only). The page and its live panel need
``activity.view_activity``, the flush and rebuild actions ``activity.run_jobs``."""

from __future__ import annotations

from typing import Any

from celery import current_app
from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.decorators import method_decorator
from django.utils.http import urlencode
from django.views.decorators.http import require_POST
from kombu.exceptions import OperationalError

from activity import permissions
from activity.admin import charts, figures
from activity.admin.rows import ReadOnlyAdmin
from activity.calendar import today, utc, zone_name
from activity.models import Dashboard
from activity.services import cohorts, funnels, reports

PANEL_TEMPLATE = "admin/activity/dashboard_panel.html"
REFRESH_S = 60  # seconds between the panel's refreshes (the live stream moves the figures meanwhile)


def require(request: HttpRequest, permission: str) -> None:
    if not request.user.has_perm(permission):
        raise PermissionDenied(f"The activity dashboard needs the permission {permission}.")


class RebuildReportForm(forms.Form):
    report = forms.ChoiceField()
    period = forms.ChoiceField(choices=[(period, period) for period in reports.REPORT_PERIODS])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["report"].choices = [(name, name) for name, _ in reports.catalogue()]


# The heatmap's size: cohorts and periods per period kind; groups the picker offers, by name.
HEATMAP_SIZE = {"day": 14, "week": 12}
PICKER_GROUPS = 200


class RetentionForm(forms.Form):
    """The heatmap's picker: a subset of ``GET /api/v1/retention/``'s parameters, answered by the
    same service (``cohorts.table``) and so by the same cached copy."""

    by = forms.ChoiceField(choices=[("first_seen", "first active"), ("signup", "signed up")], required=False)
    period = forms.ChoiceField(choices=[("day", "days"), ("week", "weeks")], required=False)
    group = forms.TypedChoiceField(coerce=int, empty_value=None, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        named = Group.objects.order_by("name").values_list("pk", "name")[:PICKER_GROUPS]
        self.fields["group"].choices = [("", "all users"), *named]


def retention_context(request: HttpRequest) -> dict[str, Any]:
    """The retention heatmap for the picker's choices (a bad choice: the defaults)."""
    form = RetentionForm(request.GET)
    chosen = form.cleaned_data if form.is_valid() else {}
    by, period, group = chosen.get("by") or "first_seen", chosen.get("period") or "day", chosen.get("group")
    size = HEATMAP_SIZE[period]
    query = cohorts.Query(by=by, period=period, cohorts=size, periods=size, group=group)
    table, cache = cohorts.table(query)
    parameters = {"by": by, "period": period, "cohorts": size, "periods": size}
    if group is not None:
        parameters["group"] = group
    return {
        "retention_form": form,
        "retention_chart": charts.heatmap(f"Retention by {period}", table),
        "retention_cache": cache,
        "retention_api": f"{reverse('activity:retention')}?{urlencode(parameters)}",
    }


class FunnelPeriodForm(forms.Form):
    """The funnels' period picker: today, this ISO week or this month, as the API's ``period``."""

    funnel_period = forms.ChoiceField(
        choices=[("day", "today"), ("week", "this week"), ("month", "this month")], required=False
    )


def funnels_context(request: HttpRequest) -> dict[str, Any]:
    """Each funnel's steps in the picked period, as bars (the same figures as the API's report)."""
    form = FunnelPeriodForm(request.GET)
    period = (form.cleaned_data.get("funnel_period") if form.is_valid() else None) or "day"
    day = today()
    shown = []
    for funnel in funnels.defined():
        report = funnels.report(funnel, period, day)
        api = reverse("activity:funnel", kwargs={"funnel_id": funnel.pk})
        shown.append(
            {
                "funnel": funnel,
                "chart": charts.funnel_bars(f"Funnel {funnel.name}", report["steps"]),
                "api": f"{api}?{urlencode({'period': period, 'date': day.isoformat()})}",
            }
        )
    return {"funnel_form": form, "funnel_period": period, "funnels": shown}


def panel_context() -> dict[str, Any]:
    found = figures.overview()
    today = found.stats.day
    return {
        "overview": found,
        "generated_at": utc(found.generated_at),
        "time_zone": zone_name(),
        "active_chart": charts.bar_chart(
            "Daily active users", [(d.day, d.active_users) for d in found.days], highlight=today, live="active.day"
        ),
        "views_chart": charts.bar_chart(
            "Daily page views", [(d.day, d.page_views) for d in found.days], highlight=today, live="page_views.day"
        ),
        "report_url": reverse("activity:report", kwargs={"name": "most-active"}),
    }


@admin.register(Dashboard)
class DashboardAdmin(ReadOnlyAdmin):
    """The dashboard page as the model's changelist, plus the panel and the two actions."""

    def get_urls(self) -> list[URLPattern]:
        site, page = self.admin_site, self.admin_site.admin_view(self.changelist_view)
        return [
            path("", page, name="activity-dashboard"),
            path("", page, name="activity_dashboard_changelist"),  # the admin index links to this name
            path("panel/", site.admin_view(self.panel_view), name="activity-dashboard-panel"),
            path("flush/", site.admin_view(self.flush_view), name="activity-dashboard-flush"),
            path("rebuild/", site.admin_view(self.rebuild_view), name="activity-dashboard-rebuild"),
        ]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> TemplateResponse:
        require(request, permissions.VIEW_ACTIVITY)
        context = {
            **self.admin_site.each_context(request),
            **panel_context(),
            **retention_context(request),
            **funnels_context(request),
            "title": "Activity dashboard",
            "opts": self.model._meta,
            "refresh_ms": REFRESH_S * 1000,
            "refresh_s": REFRESH_S,
            "rebuild_form": RebuildReportForm(initial={"report": "most-active", "period": "day"}),
            "can_run_jobs": request.user.has_perm(permissions.RUN_JOBS),
            "can_define_funnels": request.user.has_perm(permissions.DEFINE_FUNNELS),
        }
        return TemplateResponse(request, "admin/activity/dashboard.html", context)

    def panel_view(self, request: HttpRequest) -> JsonResponse:
        """The live part of the page for its refresh script: JSON, not HTML, so the poll counts as the
        staff user's activity but not as a page view."""
        require(request, permissions.VIEW_ACTIVITY)
        return JsonResponse({"html": render_to_string(PANEL_TEMPLATE, panel_context(), request)})

    @staticmethod
    def queue(request: HttpRequest, task: str, what: str, *args: str) -> None:
        """Queue ``task`` on Celery and tell the user so (or that the broker could not be reached)."""
        try:
            result = current_app.send_task(task, args=args)
        except OperationalError as error:
            messages.error(request, f"{what} was not queued: the Celery broker is unreachable ({error}).")
            return
        messages.success(request, f"{what} queued as Celery task {result.id}; a worker runs it shortly.")

    @method_decorator(require_POST)
    def flush_view(self, request: HttpRequest) -> HttpResponse:
        require(request, permissions.RUN_JOBS)
        self.queue(request, "activity.flush", "Flush of last-seen changes to the database")
        return redirect(f"{self.admin_site.name}:activity-dashboard")

    @method_decorator(require_POST)
    def rebuild_view(self, request: HttpRequest) -> HttpResponse:
        require(request, permissions.RUN_JOBS)
        form = RebuildReportForm(request.POST)
        if form.is_valid():
            name, period = form.cleaned_data["report"], form.cleaned_data["period"]
            self.queue(request, "activity.rebuild_report", f"Rebuild of report {name} ({period})", name, period)
        else:
            problems = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
            messages.error(request, f"No report rebuild queued ({problems}).")
        return redirect(f"{self.admin_site.name}:activity-dashboard")
