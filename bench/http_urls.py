"""The bench's URLconf: the product's URLs plus one bare page, served under two paths, and a bare
DRF view.

``/bench/floor/`` is listed in the bench's ``ACTIVITY_TRACK_EXCLUDE_PATHS``, so the tracking
middleware runs but records nothing there: the floor. ``/bench/page/`` is the same view, tracked.
``/bench/drf/`` (not tracked either) is DRF's own floor: what any API view pays before its work.
"""

from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from project.urls import urlpatterns as product_urlpatterns

BODY = b"<!doctype html><title>bench</title><p>A page with nothing behind it."


def page(request: HttpRequest) -> HttpResponse:
    """No template, no query of its own: what is left is the server, the middleware, the tracking,
    and who the user is (any page a signed-in user sees asks, so the floor asks too: the session
    and user lookups are the site's cost whether or not the page is tracked)."""
    greeting = request.user.get_username() if request.user.is_authenticated else ""
    return HttpResponse(BODY + greeting.encode(), content_type="text/html; charset=utf-8")


class BareAPIView(APIView):
    """Request wrapping, content negotiation and rendering, with no authentication, permission,
    throttle or Redis: the framework's part of every API request."""

    authentication_classes = []
    permission_classes = []
    throttle_classes = []

    def get(self, request: Request) -> Response:
        return Response({"ok": True})


urlpatterns = [
    path("bench/floor/", page, name="bench-floor"),
    path("bench/page/", page, name="bench-page"),
    path("bench/drf/", BareAPIView.as_view(), name="bench-drf"),
    *product_urlpatterns,
]
