"""Admin pages for the flushed rows and the daily rollups: read-only, since only the jobs write them,
but for the action erasing the selected users everywhere. The changelist costs a fixed number of
queries whatever the rows, and the shown rows' live last seen one round trip."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join

from activity import clock, conf, permissions
from activity.calendar import midnight, today, utc, week_days
from activity.errors import StoreUnavailable
from activity.models import DailyRollup, UserActivity
from activity.services import audience, last_seen, privacy, sessions

DORMANT_DAYS = 30
# Users one run of the erase action takes at most: its confirmation page lists them, and the erase
# runs inside the request. More go through the API or ``manage.py activity_erase``.
ERASE_PER_ACTION = 500


class SeenFilter(admin.SimpleListFilter):
    """Recency filters on the flushed ``last_seen`` (as fresh as the last flush)."""

    title = "last seen"
    parameter_name = "seen"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [
            ("online", "Online now"),
            ("today", "Today"),
            ("week", "This week"),
            ("dormant", f"Dormant {DORMANT_DAYS}+ days"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        now = clock.now()
        day = today()
        start_of = {
            "online": utc(now - conf.settings.ONLINE_WINDOW),
            "today": midnight(day),
            "week": midnight(week_days(day)[0]),
        }
        if self.value() in start_of:
            return queryset.filter(last_seen__gte=start_of[self.value()])
        if self.value() == "dormant":
            return queryset.filter(last_seen__lt=utc(now) - timedelta(days=DORMANT_DAYS))
        return queryset


class LiveChangeList(ChangeList):
    """Fetches the shown rows' live last seen from Redis in one round trip (ZMSCORE)."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        live = last_seen.get_many(row.user_id for row in self.result_list)
        for row in self.result_list:
            row.live_ts = live.get(row.user_id)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows only the jobs write: staff with ``activity.view_activity`` see them (the permission the
    API's reads need), nobody edits them here."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(permissions.VIEW_ACTIVITY)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(UserActivity)
class UserActivityAdmin(ReadOnlyAdmin):
    list_display = ("user_id", "account", "last_seen", "live_last_seen", "first_seen")
    list_select_related = ("account",)
    list_filter = (SeenFilter,)
    search_fields = ("user_id", "account__username", "account__email")
    sortable_by = ("user_id", "last_seen", "first_seen")
    ordering = ("-last_seen",)
    show_full_result_count = False  # no second COUNT(*) over the whole table when filtering
    list_per_page = 100
    fields = ("user_id", "account", "first_seen", "last_seen", "updated_at", "live_last_seen", "live_session")
    readonly_fields = fields
    actions = ["erase_activity"]

    def has_erase_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(permissions.ERASE_ACTIVITY)

    @admin.action(description="Erase the selected users' activity everywhere", permissions=["erase"])
    def erase_activity(self, request: HttpRequest, queryset: QuerySet) -> TemplateResponse | None:
        """Erase each selected user everywhere once staff confirmed on a page listing them, as
        Django's delete action asks: an erase cannot be undone."""
        users = list(queryset.values_list("user_id", flat=True)[: ERASE_PER_ACTION + 1])
        if len(users) > ERASE_PER_ACTION:
            limit = f"Select at most {ERASE_PER_ACTION} users per erase"
            self.message_user(request, f"{limit} (for more: the API or manage.py activity_erase).", messages.ERROR)
            return None
        if request.POST.get("post") != "yes":
            context = {
                **self.admin_site.each_context(request),
                "title": "Erase activity",
                "users": users,
                "opts": self.model._meta,
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "media": self.media,
            }
            return TemplateResponse(request, "admin/activity/useractivity/erase_confirmation.html", context)
        erased = []
        try:
            for user_id in users:
                privacy.erase(user_id)
                erased.append(user_id)
        except StoreUnavailable as error:
            self.message_user(
                request, f"Redis is unavailable ({error}): {len(erased)} erased, retry the rest.", messages.ERROR
            )
            return None
        self.message_user(request, f"Erased {len(erased)} users' activity everywhere.", messages.SUCCESS)
        return None

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return LiveChangeList

    @admin.display(description="live last seen (Redis)")
    def live_last_seen(self, row: UserActivity) -> str:
        """From the changelist's one ZMSCORE for the page, or read on its own on the row's page."""
        ts = row.live_ts if hasattr(row, "live_ts") else last_seen.get_many([row.user_id])[row.user_id]
        if ts is None:
            return "not in Redis (pruned or never seen)"
        return f"{utc(ts):%Y-%m-%d %H:%M:%S} UTC" + (" (online)" if last_seen.is_online(ts) else "")

    @admin.display(description="current navigation session")
    def live_session(self, row: UserActivity) -> str:
        views = sessions.current(row.user_id)
        if not views:
            return "no live session"
        rows = format_html_join("", "<tr><td>{}</td><td>{}</td></tr>", ((f"{utc(ts):%H:%M:%S}", p) for p, ts in views))
        return format_html(
            '<table class="activity-session"><thead><tr><th>time (UTC)</th><th>page</th></tr></thead>'
            "<tbody>{}</tbody></table>",
            rows,
        )


@admin.register(DailyRollup)
class DailyRollupAdmin(ReadOnlyAdmin):
    list_display = ("day", *audience.ROLLUP_FIGURES, "time_zone", "updated_at")
    date_hierarchy = "day"
