from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    # The activity app at the root: /api/v1/..., /healthz and /metrics.
    path("", include("activity.urls")),
]

# Errors under /api/ are JSON like every other API answer; elsewhere Django's own pages.
handler400 = "activity.web.api.errors.bad_request"
handler404 = "activity.web.api.errors.not_found"
handler500 = "activity.web.api.errors.server_error"
