from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import include, path, reverse_lazy
from django.views.generic import RedirectView

# The admin's "View site" link: the API's docs, this example site's own pages.
admin.site.site_url = reverse_lazy("activity:docs")

urlpatterns = [
    path("admin/", admin.site.urls),
    # The front page leads to the dashboard (through the admin's login when signed out).
    path("", RedirectView.as_view(pattern_name="admin:activity-dashboard"), name="home"),
    # The activity app at the root: /api/v1/..., /healthz and /metrics, and its JSON 404 for any
    # other path (so it comes last).
    path("", include("activity.urls")),
]


def bad_request(request: HttpRequest, exception: Exception) -> JsonResponse:
    """A request Django refused before any view (a disallowed Host header): this site serves an API,
    so in JSON, as its errors are. The one handler the app cannot stand in for, and needs none of."""
    return JsonResponse({"detail": "Bad request."}, status=400)


handler400 = bad_request
