"""The API's error answers, all JSON, from the app's own views whatever the site's handlers: their
exception handler (Redis or the database unable to serve: 503 with Retry-After; an idempotency key
in use 409 with Retry-After, or reused with another body 422; an oversized body 413; a request
Django finds suspicious 400; a bug 500, its traceback logged), and the JSON 404 for paths under
the app's prefix that no route matches (``not_found``, the last route of ``activity.urls``)."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.urls import Resolver404, resolve
from django.views.decorators.common import no_append_slash
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from activity.errors import KeyInUse, KeyReused, StoreUnavailable

logger = logging.getLogger("activity.web.api")

RETRY_AFTER_SECONDS = 5


def _answer(detail: str, code: int, headers: dict[str, str] | None = None) -> Response:
    set_rollback()  # as DRF does for its own answers, on a site with ATOMIC_REQUESTS
    return Response({"detail": detail}, status=code, headers=headers)


def _unavailable(detail: str) -> Response:
    return _answer(detail, status.HTTP_503_SERVICE_UNAVAILABLE, {"Retry-After": str(RETRY_AFTER_SECONDS)})


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every exception of the app's views as a JSON answer (``ServiceView.get_exception_handler``)."""
    request: Request = context["request"]
    if isinstance(exc, StoreUnavailable):
        logger.error("Redis unavailable: %s", exc, exc_info=exc)
        return _unavailable("Activity store (Redis) is unavailable; try again shortly.")
    # Locked, gone or timing out (SQLite's busy timeout, PostgreSQL's lock or statement timeout, a
    # dropped connection): worth retrying. Other database errors are bugs, answered as below.
    if isinstance(exc, OperationalError | InterfaceError):
        logger.error("database unavailable: %s", exc, exc_info=exc)
        return _unavailable("The database is unavailable; try again shortly.")
    if isinstance(exc, KeyInUse):
        return _answer(str(exc), status.HTTP_409_CONFLICT, {"Retry-After": str(exc.retry_after)})
    if isinstance(exc, KeyReused):
        return _answer(str(exc), status.HTTP_422_UNPROCESSABLE_ENTITY)
    if isinstance(exc, RequestDataTooBig):
        return _answer(str(exc), status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, SuspiciousOperation):  # too many query fields, ...: what Django answers 400
        security = logging.getLogger(f"django.security.{type(exc).__name__}")
        security.error(str(exc), exc_info=exc, extra={"status_code": 400, "request": request._request})
        return _answer("Bad request.", status.HTTP_400_BAD_REQUEST)
    response = drf_exception_handler(exc, context)
    if response is None and not settings.DEBUG:  # with DEBUG, Django's debug page
        return _server_error(exc, request)
    return response


def _server_error(exc: Exception, request: Request) -> Response:
    """A bug, answered in JSON without details: its traceback logged here, the signal sent as Django
    sends it (test clients and error trackers listen), and the 500 logged by Django as any other."""
    logger.error("Internal Server Error: %s", request.path, exc_info=exc)
    got_request_exception.send(sender=None, request=request._request)
    return _answer("Server error.", status.HTTP_500_INTERNAL_SERVER_ERROR)


@no_append_slash
def not_found(request: HttpRequest, path: str = "") -> HttpResponse:
    """Any path under the app's prefix that no route matched, such as an id holding an encoded slash
    (``users/a%2Fb/``). A path missing only its trailing slash is redirected as ``CommonMiddleware``
    would (this catch-all makes every path resolve, so the middleware no longer does)."""
    if settings.APPEND_SLASH and not request.path_info.endswith("/"):
        try:
            match = resolve(f"{request.path_info}/", getattr(request, "urlconf", None))
        except Resolver404:
            pass
        else:
            if getattr(match.func, "should_append_slash", True):
                return HttpResponsePermanentRedirect(request.get_full_path(force_append_slash=True))
    return JsonResponse({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
