from django.urls import path

from activity.web.api import views
from activity.web.api.docs import DocsView, SchemaView

urlpatterns = [
    path("events/", views.EventsView.as_view(), name="events"),
    path("users/<str:user>/last-seen/", views.LastSeenView.as_view(), name="last-seen"),
    path("users/<str:user>/session/", views.SessionView.as_view(), name="session"),
    path("users/<str:user>/activity/", views.UserActivityView.as_view(), name="user-activity"),
    path("users/<str:user>/activity/export/", views.UserActivityExportView.as_view(), name="user-activity-export"),
    path("users/<str:user>/recommendations/", views.RecommendationsView.as_view(), name="recommendations"),
    path("pages/next/", views.NextPagesView.as_view(), name="next-pages"),
    path("pages/now/", views.PagesNowView.as_view(), name="pages-now"),
    path("live/", views.LiveView.as_view(), name="live"),
    path("online/", views.OnlineView.as_view(), name="online"),
    path("stats/", views.StatsView.as_view(), name="stats"),
    path("retention/", views.RetentionView.as_view(), name="retention"),
    path("reports/", views.ReportListView.as_view(), name="reports"),
    path("reports/<str:name>/", views.ReportView.as_view(), name="report"),
    path("groups/<str:group_id>/members/", views.GroupMembersView.as_view(), name="group-members"),
    path("groups/<str:group_id>/active/", views.GroupActiveView.as_view(), name="group-active"),
    path("funnels/", views.FunnelListView.as_view(), name="funnels"),
    path("funnels/<str:funnel_id>/", views.FunnelView.as_view(), name="funnel"),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("docs/", DocsView.as_view(url_name="activity:schema"), name="docs"),
]
