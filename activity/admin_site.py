"""The admin site with the activity dashboard: its page, its live panel and its two actions.

Installed by listing ``activity.apps.ActivityAdminConfig`` instead of ``django.contrib.admin``; a
project with its own ``AdminSite`` subclasses this one instead. Every view goes through
``admin_view``, so only active staff get in (others are sent to the admin login); among staff, the
page and its panel need the permission ``activity.view_dashboard`` and the two actions
``activity.run_jobs`` (403 otherwise), like any other admin page needs its model permission.
"""

from __future__ import annotations

from typing import Any

from celery import current_app
from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.decorators import method_decorator
from django.views.decorators.http import require_POST
from kombu.exceptions import OperationalError

from activity import charts, conf, dashboard, reports
from activity.calendar import utc

PANEL_TEMPLATE = "admin/activity/dashboard_panel.html"
VIEW_PERMISSION = "activity.view_dashboard"
RUN_PERMISSION = "activity.run_jobs"


def require(request: HttpRequest, permission: str) -> None:
    if not request.user.has_perm(permission):
        raise PermissionDenied(f"The activity dashboard needs the permission {permission}.")


class RebuildReportForm(forms.Form):
    report = forms.ChoiceField()
    period = forms.ChoiceField(choices=[(period, period) for period in reports.PERIODS])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["report"].choices = [(name, name) for name, _ in reports.catalogue()]


def panel_context() -> dict[str, Any]:
    found = dashboard.overview()
    today = found.stats.day
    return {
        "overview": found,
        "generated_at": utc(found.generated_at),
        "active_chart": charts.bar_chart(
            "Daily active users", [(d.day, d.active_users) for d in found.days], highlight=today
        ),
        "views_chart": charts.bar_chart(
            "Daily page views", [(d.day, d.page_views) for d in found.days], highlight=today
        ),
        "report_url": reverse("report", kwargs={"name": "most-active"}),
    }


class ActivityAdminSite(admin.AdminSite):
    def get_urls(self) -> list[URLPattern]:
        urls = [
            path("activity/dashboard/", self.admin_view(self.dashboard_view), name="activity-dashboard"),
            path("activity/dashboard/panel/", self.admin_view(self.panel_view), name="activity-dashboard-panel"),
            path("activity/dashboard/flush/", self.admin_view(self.flush_view), name="activity-dashboard-flush"),
            path("activity/dashboard/rebuild/", self.admin_view(self.rebuild_view), name="activity-dashboard-rebuild"),
        ]
        return urls + super().get_urls()

    def get_app_list(self, request: HttpRequest, app_label: str | None = None) -> list[dict[str, Any]]:
        """The admin's app list with the dashboard as the first entry of the Activity app."""
        app_list = super().get_app_list(request, app_label)
        if app_label not in (None, "activity") or not request.user.has_perm(VIEW_PERMISSION):
            return app_list
        url = reverse(f"{self.name}:activity-dashboard")
        entry = {"name": "Activity dashboard", "object_name": "Dashboard", "admin_url": url, "view_only": True}
        entry["perms"] = {"view": True}
        for app in app_list:
            if app["app_label"] == "activity":
                app["models"].insert(0, entry)
                return app_list
        app_list.append({"name": "Activity", "app_label": "activity", "app_url": url, "models": [entry]})
        app_list.sort(key=lambda app: app["name"].lower())
        return app_list

    def dashboard_view(self, request: HttpRequest) -> TemplateResponse:
        require(request, VIEW_PERMISSION)
        context = {
            **self.each_context(request),
            **panel_context(),
            "title": "Activity dashboard",
            "refresh_ms": int(conf.settings.DASHBOARD_REFRESH * 1000),
            "rebuild_form": RebuildReportForm(initial={"report": "most-active", "period": "day"}),
            "can_run_jobs": request.user.has_perm(RUN_PERMISSION),
        }
        return TemplateResponse(request, "admin/activity/dashboard.html", context)

    def panel_view(self, request: HttpRequest) -> JsonResponse:
        """The live part of the page, re-rendered for the page's refresh script.

        JSON rather than an HTML page, so the middleware counts the poll as activity of the
        staff user but not as a page view of their navigation session.
        """
        require(request, VIEW_PERMISSION)
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
        require(request, RUN_PERMISSION)
        self.queue(request, "activity.flush", "Flush of last-seen changes to the database")
        return redirect(f"{self.name}:activity-dashboard")

    @method_decorator(require_POST)
    def rebuild_view(self, request: HttpRequest) -> HttpResponse:
        require(request, RUN_PERMISSION)
        form = RebuildReportForm(request.POST)
        if form.is_valid():
            name, period = form.cleaned_data["report"], form.cleaned_data["period"]
            self.queue(request, "activity.rebuild_report", f"Rebuild of report {name} ({period})", name, period)
        else:
            problems = "; ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
            messages.error(request, f"No report rebuild queued ({problems}).")
        return redirect(f"{self.name}:activity-dashboard")
