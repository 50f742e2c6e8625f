"""JSON answers written by orjson: DRF's ``JSONRenderer`` runs the stdlib encoder in Python, the
costliest step left in answering a small request."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

_fallback = JSONEncoder()  # DRF's own rules for what orjson does not know (lazy strings, Decimal, ...)


class FastJSONRenderer(JSONRenderer):
    """``application/json`` as DRF renders it (UTF-8, compact), by orjson."""

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Mapping | None = None
    ) -> bytes:
        if data is None:
            return b""
        return orjson.dumps(data, default=_fallback.default)


class PrometheusRenderer(BaseRenderer):
    """The Prometheus text exposition, already rendered (``activity.services.health``)."""

    media_type = CONTENT_TYPE_LATEST.split(";")[0]
    format = "prometheus"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Mapping | None = None
    ) -> bytes:
        return data
