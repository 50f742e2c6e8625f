"""The OpenAPI document's own parts: the schema class of the app's views, which names each
operation's permission, and the error answers, every status an operation can give besides its
success, with its JSON shape and headers, so clients (and schemathesis) can rely on the document."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers

from activity.web.api.permissions import HasPermission


class ServiceSchema(AutoSchema):
    """drf-spectacular's, with each operation's permission as ``x-permission`` (and
    ``x-permission-self: true`` where the user named in the URL needs none), read from the view's
    permission classes, so the document cannot drift from what the view checks."""

    def get_extensions(self) -> dict[str, Any]:
        found = dict(super().get_extensions())
        for permission in self.view.get_permissions():
            if isinstance(permission, HasPermission):
                found["x-permission"] = permission.permission
                if permission.or_self:
                    found["x-permission-self"] = True
        return found


Method = TypeVar("Method", bound=Callable[..., Any])


def operation(**kwargs: Any) -> Callable[[Method], Method]:
    """``extend_schema`` for a method of the app's views, built on ``ServiceSchema``: left alone,
    ``extend_schema`` builds on the site's ``DEFAULT_SCHEMA_CLASS``, which need not be drf-spectacular's
    (DRF's own is the default), but it builds on a schema the method names first."""

    def decorate(method: Method) -> Method:
        method.schema = ServiceSchema  # type: ignore[attr-defined]
        return extend_schema(**kwargs)(method)

    return decorate


class ErrorSerializer(serializers.Serializer):
    """Every error that is not about a field: 401, 403, 404, 406, 408, 409, 413, 415, 422, 429 and 503."""

    detail = serializers.CharField(help_text="What went wrong, for a person to read.")


# DRF's field-error shape: {"<field>": ["reason", ...]}, nested for the events of a batch
# ({"events": {"3": {"ts": ["reason"]}}}); a body that is not JSON gives {"detail": "JSON parse error - ..."}.
FIELD_ERRORS: dict[str, Any] = {
    "type": "object",
    "additionalProperties": {
        "anyOf": [
            {"type": "string"},
            {"type": "array", "items": {"type": "string"}},
            {"type": "object", "additionalProperties": True},
        ]
    },
}

DESCRIPTIONS = {
    400: "Invalid input: {field: [reasons]} (nested by event index for a batch), or {detail} for a body "
    "that is not JSON. Nothing was written.",
    401: "No credentials, or invalid ones.",
    403: "Authenticated, but without the operation's permission (x-permission), or another user's data.",
    404: "Not found: nothing known at this id, group, report or page (a page past the last one).",
    406: "The Accept header allows no JSON.",
    408: "The body did not arrive within the server's body timeout (make run: 30 s); the connection is closed.",
    409: "A request with this Idempotency-Key is still running; retry after Retry-After seconds.",
    413: "The body is larger than DATA_UPLOAD_MAX_MEMORY_SIZE.",
    414: "The URL is longer than 65,534 bytes (make run's server): answered by the HTTP server before the "
    "app, with an empty body.",
    415: "The body is not application/json, or its charset is not one the service can decode (send UTF-8).",
    422: "This Idempotency-Key was used with another body; nothing was written.",
    429: "Throttled; retry after Retry-After seconds.",
    431: "The request line and headers are too large (make run's server: more than 100 fields, or about "
    "400 KB): answered by the HTTP server before the app, with an empty body.",
    503: "Redis or the database cannot serve now; retry after Retry-After seconds.",
}

# Any operation can answer these: the server's limits, credentials, content negotiation, throttling,
# Redis or the database.
ALWAYS = (401, 403, 406, 408, 414, 429, 431, 503)

HEADERS = [
    OpenApiParameter(
        "Retry-After",
        int,
        OpenApiParameter.HEADER,
        required=True,
        response=[429, 503],
        description="Seconds to wait before retrying.",
    ),
    OpenApiParameter(
        "WWW-Authenticate",
        str,
        OpenApiParameter.HEADER,
        required=True,
        response=[401],
        description="The scheme to authenticate with (`Token`).",
    ),
]


def responses(success: dict[int, Any], *errors: int) -> dict[int, Any]:
    """``success`` plus the documented error answers: ``errors`` and those of ``ALWAYS``."""
    found: dict[int, Any] = dict(success)
    for code in sorted({*ALWAYS, *errors}):
        shape = FIELD_ERRORS if code == 400 else None if code in (414, 431) else ErrorSerializer
        found[code] = OpenApiResponse(shape, description=DESCRIPTIONS[code])
    return found
