"""A host site's URLs for tests: its admin, pages of its own named as some of the app's routes are
(``docs``, ``stats``), and the app included under ``activity/`` as the README's step 3 does."""

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.urls import include, path


def page(request: HttpRequest) -> HttpResponse:
    return HttpResponse("<html><body>the site's own page</body></html>", content_type="text/html")


urlpatterns = [
    path("admin/", admin.site.urls),
    path("docs/", page, name="docs"),
    path("stats/", page, name="stats"),
    path("activity/", include("activity.urls")),
]
