"""The one include a site adds: ``path("activity/", include("activity.urls"))`` serves the API under
``api/v1/``, ``healthz`` and ``metrics`` at the prefix of its choosing."""

from django.urls import include, path

from activity.web.api.views import MetricsView
from activity.web.health import healthz

urlpatterns = [
    path("api/v1/", include("activity.web.api.urls")),
    path("healthz", healthz, name="healthz"),
    path("metrics", MetricsView.as_view(), name="metrics"),
]
