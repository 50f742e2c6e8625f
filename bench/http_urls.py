"""The bench's URLconf: the product's URLs plus one bare page, served under two paths.

``/bench/floor/`` is listed in the bench's ``ACTIVITY_TRACK_EXCLUDE_PATHS``, so the tracking
middleware runs but records nothing there: the floor. ``/bench/page/`` is the same view, tracked.
"""

from django.http import HttpRequest, HttpResponse
from django.urls import path

from project.urls import urlpatterns as product_urlpatterns

BODY = b"<!doctype html><title>bench</title><p>A page with nothing behind it."


def page(request: HttpRequest) -> HttpResponse:
    """No template, no query of its own: what is left is the server, the middleware, the tracking,
    and who the user is (any page a signed-in user sees asks, so the floor asks too: the session
    and user lookups are the site's cost whether or not the page is tracked)."""
    greeting = request.user.get_username() if request.user.is_authenticated else ""
    return HttpResponse(BODY + greeting.encode(), content_type="text/html; charset=utf-8")


urlpatterns = [
    path("bench/floor/", page, name="bench-floor"),
    path("bench/page/", page, name="bench-page"),
    *product_urlpatterns,
]
