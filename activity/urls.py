"""The one include a site adds: ``path("activity/", include("activity.urls"))`` serves the API under
``api/v1/``, ``healthz`` and ``metrics`` at the prefix of its choosing, and the API's JSON 404 for
any other path under that prefix (so the site needs no error handlers for the app). Its names are in
the ``activity`` namespace (``reverse("activity:stats")``), so none takes the place of a site's own."""

from django.urls import include, path, re_path

from activity.web.api.errors import not_found
from activity.web.api.views import MetricsView
from activity.web.health import healthz
from activity.web.middleware import untracked

app_name = "activity"

urlpatterns = [
    path("api/v1/", include("activity.web.api.urls")),
    path("healthz", untracked(healthz), name="healthz"),
    path("metrics", untracked(MetricsView.as_view()), name="metrics"),
    re_path(r"^(?P<path>.*)$", not_found),  # last: only what no route above matched
]
