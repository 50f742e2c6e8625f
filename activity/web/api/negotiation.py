"""Content negotiation that decides the common case without parsing: API clients mostly send no
``Accept`` header, ``*/*``, or exactly the first renderer's media type. DRF's own negotiation
tokenizes and orders the header on every request, a measurable share of a small request's cost."""

from __future__ import annotations

from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request


class ContentNegotiation(DefaultContentNegotiation):
    def select_renderer(
        self, request: Request, renderers: list[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        """What DRF's negotiation answers (tested to agree), without parsing when no format is asked
        for and ``Accept`` is absent, ``*/*`` or the first renderer's media type."""
        # ``query_params`` parses the query string into a QueryDict; most API requests have none.
        query = request.META.get("QUERY_STRING")
        format_asked = format_suffix or (query and request.query_params.get(self.settings.URL_FORMAT_OVERRIDE))
        if renderers and not format_asked:
            first = renderers[0]
            if request.META.get("HTTP_ACCEPT", "*/*") in ("*/*", first.media_type):
                return first, first.media_type
        return super().select_renderer(request, renderers, format_suffix)
