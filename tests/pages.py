"""A plain site page for middleware tests: what a Django team's own views look like to the tracker."""

from django.http import HttpResponse
from django.urls import include, path


def page(request):
    return HttpResponse("<html><body>pricing</body></html>", content_type="text/html")


urlpatterns = [
    path("pricing", page),
    path("static/app.css", page),
    path("", include("project.urls")),
]
