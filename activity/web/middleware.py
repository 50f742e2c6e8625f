"""Tracking middleware: the signed-in user's last seen (and, for a GET answering 2xx with HTML, a page
view), or an anonymous visit, handed to the process's batches (``services.tracking``). Anonymous
browsers get a signed random visitor cookie, never derived from the IP, unless cookies are off, they
opt out or the site's consent says no, and count only once they send it back (docs/visitors.md). It
fails open: Redis failing pauses tracking (``tracking.fail_open``), never the page.
"""

from __future__ import annotations

import functools
import logging
import re
import secrets
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings as django_settings
from django.contrib.auth.signals import user_logged_in
from django.core.signing import BadSignature, Signer
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from activity import clock, conf
from activity.errors import InvalidValue, StoreUnavailable
from activity.events import MAX_PATH_LENGTH, Event, clean_user
from activity.services import signin, tracking, traffic
from activity.services.tracking import Activity

logger = logging.getLogger("activity.web.middleware")


# Set on a request whose caller's activity the API view hands to the batches itself (when the
# request succeeds), so the middleware leaves the request alone.
RECORDED = "activity_recorded"

# Requests tracked: these methods, answered with these statuses (redirects included).
TRACK_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
TRACK_STATUSES = range(200, 400)
# A page view is a GET answering 2xx with one of these content types.
PAGE_CONTENT_TYPES = ("text/html",)
VISITOR_COOKIE_NAME = "act_vid"
VISITOR_COOKIE_AGE = 365 * 86400
# Set on a view that is never activity, read from the request's resolved view as Django reads
# ``csrf_exempt``.
UNTRACKED = "activity_untracked"

View = TypeVar("View", bound=Callable[..., Any])


def untracked(view: View) -> View:
    """``view`` never counts as activity: the app's probes (``healthz``, ``metrics``) wherever the site
    mounts them, which a path in ``ACTIVITY_TRACK_EXCLUDE_PATHS`` covers only at the root."""
    setattr(view, UNTRACKED, True)
    return view


def tracks_request(request: HttpRequest) -> bool:
    """Whether requests like this one count as activity (method, path and view filters)."""
    if request.method not in TRACK_METHODS or request.path.startswith(conf.settings.TRACK_EXCLUDE_PATHS):
        return False
    match = getattr(request, "resolver_match", None)
    return not getattr(getattr(match, "func", None), UNTRACKED, False)


def is_tracked(request: HttpRequest, response: HttpResponse) -> bool:
    """Whether this request/response pair counts as activity (method, status and path filters)."""
    if response.status_code not in TRACK_STATUSES:
        return False
    return tracks_request(request) and not getattr(request, RECORDED, False)


def tracked_user(request: HttpRequest, response: HttpResponse) -> str | None:
    """The user id to record for this request, or None when the request is not tracked."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not is_tracked(request, response):
        return None
    try:
        return clean_user(str(user.pk))  # any pk type (int, UUID, ...), as the flush parses it back
    except InvalidValue:
        return None


VISITOR_ID_RE = re.compile(r"[0-9a-f]{32}")
VISITOR_SIGNER_SALT = "activity.visitor"
VISITOR_CACHE_SIZE = 4096  # verified visitor cookies remembered per process


@functools.cache
def _consent_callable(path: str) -> Callable[[HttpRequest], bool]:
    return import_string(path)


def visitor_cookies_allowed(request: HttpRequest) -> bool:
    """The consent switch: the setting, the browser's opt-out signal (GPC, DNT), then the site's
    callable (if configured) for this request."""
    if not conf.settings.VISITOR_COOKIES or traffic.opted_out(request):
        return False
    path = conf.settings.VISITOR_CONSENT
    return not path or bool(_consent_callable(path)(request))


def visitor_from_cookie(value: str) -> str | None:
    """The visitor id a cookie carries, or None unless we minted it (signature checked, so a client
    cannot invent ids to fill the first-visit store)."""
    return _unsigned_visitor(value, django_settings.SECRET_KEY, tuple(django_settings.SECRET_KEY_FALLBACKS))


# A returning browser sends the same cookie on every page: its signature (four SHA-256 runs) is
# checked once per process and key, not per request. Bounded, so junk cookies only evict.
@functools.lru_cache(maxsize=VISITOR_CACHE_SIZE)
def _unsigned_visitor(value: str, key: str, fallback_keys: tuple[str, ...]) -> str | None:
    try:
        visitor = Signer(key=key, fallback_keys=fallback_keys, salt=VISITOR_SIGNER_SALT).unsign(value)
    except BadSignature:
        return None
    return visitor if VISITOR_ID_RE.fullmatch(visitor) else None


def tracked_visitor(request: HttpRequest, response: HttpResponse) -> str | None:
    """An anonymous request's visitor id, once its browser sent the cookie back. Without a valid
    cookie it gets one and records nothing, or a client that keeps no cookies (a bot, curl, a probe)
    would be a new visitor, and a permanent first-visit entry, on every request. None too for
    signed-in users, untracked requests and refused consent."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return None
    if not is_tracked(request, response):
        return None
    name = VISITOR_COOKIE_NAME
    if not visitor_cookies_allowed(request):
        if name in request.COOKIES and traffic.opted_out(request):
            response.delete_cookie(name, samesite="Lax")  # the browser asked: its id goes too
        return None
    visitor = visitor_from_cookie(request.COOKIES.get(name, ""))
    if visitor is None:
        response.set_cookie(
            name,
            Signer(salt=VISITOR_SIGNER_SALT).sign(secrets.token_hex(16)),
            max_age=VISITOR_COOKIE_AGE,
            secure=request.is_secure(),
            httponly=True,
            samesite="Lax",
        )
    return visitor


def page_view_path(request: HttpRequest, response: HttpResponse) -> str | None:
    """The path (with its query string, which the service drops) when this tracked request is a page
    view: a GET answering 2xx with one of ``PAGE_CONTENT_TYPES``."""
    if request.method != "GET" or not 200 <= response.status_code <= 299:
        return None
    content_type = response.get("Content-Type", "").split(";", 1)[0].strip().lower()
    if content_type not in PAGE_CONTENT_TYPES:
        return None
    return request.get_full_path()[:MAX_PATH_LENGTH]


def continue_visitor(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    """``user_logged_in``: a browser holding our visitor cookie signed in, so the visitor continues
    as the user (``services.signin``): its session's pages, its funnel progress, and a link. Fails
    open as tracking does: Redis failing never fails the sign-in."""
    if request is None or not visitor_cookies_allowed(request) or tracking.fail_open.paused():
        return
    visitor = visitor_from_cookie(request.COOKIES.get(VISITOR_COOKIE_NAME, ""))
    if visitor is None:
        return
    try:
        signin.continue_visitor(visitor, clean_user(str(user.pk)))
    except InvalidValue:
        return
    except StoreUnavailable as error:
        tracking.fail_open.failed(error)


class ActivityMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        # Where the visitor cookie is given, a sign-in continues the visitor; once per process.
        user_logged_in.connect(continue_visitor, dispatch_uid="activity.continue_visitor")

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not is_tracked(request, response):
            return response
        kind = traffic.classify(request)
        user = tracked_user(request, response)
        visitor = None if user is not None or kind != traffic.PERSON else tracked_visitor(request, response)
        if (user is not None or visitor is not None or kind != traffic.PERSON) and not tracking.fail_open.paused():
            now = clock.now()
            path = page_view_path(request, response)
            if user is not None:
                event = Event(user=user, ts=now, path=path)
                tracking.record(Activity(kind, event=event, name=request.user.get_username()))
            elif visitor is not None:
                tracking.record(Activity(kind, visitor=(visitor, now), path=path))
            else:
                tracking.record(Activity(kind))
        return response
