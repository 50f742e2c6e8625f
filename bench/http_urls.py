"""The bench's URLconf: the product's URLs plus one bare page, served under two paths, a bare DRF
view, and the two of them again making one Redis read.

``/bench/floor/`` is listed in the bench's ``ACTIVITY_TRACK_EXCLUDE_PATHS``, so the tracking
middleware runs but records nothing there: the floor. ``/bench/page/`` is the same view, tracked.
``/bench/drf/`` (not tracked either) is DRF's own floor: what any API view pays before its work.
``/bench/floor/read/`` and ``/bench/drf/read/`` (under the same untracked prefixes) add one Redis
read through the service, the one GET last-seen makes, and nothing else: what one round trip costs
a page, and the most any API view that reads Redis can reach on this stack (its ceiling).
"""

from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from activity.services import last_seen
from activity.web.api.service_view import OwnConfiguration
from bench.web import READ_USER
from project.urls import urlpatterns as product_urlpatterns

BODY = b"<!doctype html><title>bench</title><p>A page with nothing behind it."


def page(request: HttpRequest) -> HttpResponse:
    """No template, no query of its own: what is left is the server, the middleware, the tracking,
    and who the user is (any page a signed-in user sees asks, so the floor asks too: the session
    and user lookups are the site's cost whether or not the page is tracked)."""
    greeting = request.user.get_username() if request.user.is_authenticated else ""
    return HttpResponse(BODY + greeting.encode(), content_type="text/html; charset=utf-8")


def page_reading(request: HttpRequest) -> HttpResponse:
    """The floor's page after one Redis read (a ZSCORE): one round trip's cost alone."""
    last_seen.get(READ_USER)
    return page(request)


class BareAPIView(APIView):
    """Request wrapping, content negotiation and rendering, with no authentication, permission,
    throttle or Redis: the framework's part of every API request."""

    authentication_classes = []
    permission_classes = []
    throttle_classes = []
    renderer_classes = OwnConfiguration.renderer_classes  # the service's (no site REST_FRAMEWORK sets them)

    def get(self, request: Request) -> Response:
        return Response({"ok": True})


class BareAPIViewReading(BareAPIView):
    """The bare DRF view after one Redis read: the framework and one round trip, no authentication,
    permission, throttle or tracking code. No API view that reads Redis can answer faster."""

    def get(self, request: Request) -> Response:
        last_seen.get(READ_USER)
        return super().get(request)


urlpatterns = [
    path("bench/floor/", page, name="bench-floor"),
    path("bench/floor/read/", page_reading, name="bench-floor-read"),
    path("bench/page/", page, name="bench-page"),
    path("bench/drf/", BareAPIView.as_view(), name="bench-drf"),
    path("bench/drf/read/", BareAPIViewReading.as_view(), name="bench-drf-read"),
    *product_urlpatterns,
]
