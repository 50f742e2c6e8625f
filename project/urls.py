from django.contrib import admin
from django.urls import include, path

from activity.api.views import MetricsView
from activity.health import healthz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("activity.api.urls")),
    path("healthz", healthz, name="healthz"),
    path("metrics", MetricsView.as_view(), name="metrics"),
]

# Errors under /api/ are JSON like every other API answer; elsewhere Django's own pages.
handler400 = "activity.api.errors.bad_request"
handler404 = "activity.api.errors.not_found"
handler500 = "activity.api.errors.server_error"
