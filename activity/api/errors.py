"""DRF exception handler: Redis unavailable is 503 with Retry-After, oversized bodies 413."""

from __future__ import annotations

import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from activity.errors import StoreUnavailable

logger = logging.getLogger("activity.api")

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
