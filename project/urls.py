from pathlib import Path

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import include, path, reverse_lazy
from django.views.decorators.cache import cache_control
from django.views.generic import RedirectView

from activity.web.middleware import untracked

# The admin's "View site" link: the API's docs, this example site's own pages.
admin.site.site_url = reverse_lazy("activity:docs")

FAVICON = (Path(__file__).parent / "favicon.ico").read_bytes()


@untracked  # never activity, whatever ACTIVITY_TRACK_EXCLUDE_PATHS lists (its default has the path)
@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> HttpResponse:
    """The icon every browser asks for at /favicon.ico, which would otherwise be the app's JSON 404."""
    return HttpResponse(FAVICON, content_type="image/x-icon")


urlpatterns = [
    path("admin/", admin.site.urls),
    # The front page leads to the dashboard (through the admin's login when signed out).
    path("", RedirectView.as_view(pattern_name="admin:activity-dashboard"), name="home"),
    path("favicon.ico", favicon, name="favicon"),
    # The activity app at the root: /api/v1/..., /healthz and /metrics, and its JSON 404 for any
    # other path (so it comes last).
    path("", include("activity.urls")),
]


def bad_request(request: HttpRequest, exception: Exception) -> JsonResponse:
    """A request Django refused before any view (a disallowed Host header): this site serves an API,
    so in JSON, as its errors are. The one handler the app cannot stand in for, and needs none of."""
    return JsonResponse({"detail": "Bad request."}, status=400)


handler400 = bad_request
