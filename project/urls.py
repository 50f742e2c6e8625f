from django.contrib import admin
from django.urls import include, path

from activity.health import healthz

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("activity.api.urls")),
    path("healthz", healthz, name="healthz"),
]
