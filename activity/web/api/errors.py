"""The API's error answers, all JSON: DRF's exception handler (Redis unavailable is 503 with
Retry-After, oversized bodies 413) and Django's error views for requests that never reach a DRF view
(no URL matched, or an uncaught exception), JSON under ``/api/`` and Django's own pages elsewhere."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from activity.errors import StoreUnavailable

logger = logging.getLogger("activity.web.api")

RETRY_AFTER_SECONDS = 5


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, StoreUnavailable):
        logger.warning("Redis unavailable: %s", exc)
        return Response(
            {"detail": "Activity store (Redis) is unavailable; try again shortly."},
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    if isinstance(exc, RequestDataTooBig):
        return Response({"detail": str(exc)}, status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    return drf_exception_handler(exc, context)


API_PREFIX = "/api/"


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler400``: a request Django refused before any view (a disallowed Host header, ...)."""
    if _is_api(request):
        return JsonResponse({"detail": "Bad request."}, status=status.HTTP_400_BAD_REQUEST)
    return defaults.bad_request(request, exception)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler404``: no URL matched (e.g. an id holding an encoded slash, ``users/a%2Fb/``)."""
    if _is_api(request):
        return JsonResponse({"detail": "Not found."}, status=status.HTTP_404_NOT_FOUND)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: a bug, answered in JSON without details (Django has logged the traceback)."""
    if _is_api(request):
        return JsonResponse({"detail": "Server error."}, status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    return defaults.server_error(request)
