"""JSON parsing that rejects what the stdlib would guess at, and lets the serializers name the field
holding NaN or Infinity."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework.exceptions import ParseError, UnsupportedMediaType
from rest_framework.parsers import JSONParser

from activity.web.charsets import usable_charset


def _object_without_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict; a key given twice is an error (the stdlib would keep the last one, so
    ``{"ts": "bad", "ts": 1}`` would pass validation on a value the client may not have meant)."""
    found = dict(pairs)
    if len(found) != len(pairs):
        duplicate = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise ValueError(f"duplicate key {duplicate!r} in an object")
    return found


class EventJSONParser(JSONParser):
    """DRF's JSON parser, stricter on structure (a repeated key or a body nested too deep is a parse
    error) and lenient on NaN/Infinity, so ``ts`` validation can name the event and field holding one
    where DRF's strict mode refuses the whole body."""

    def parse(self, stream: IO[bytes], media_type: str | None = None, parser_context: Mapping | None = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        body = stream.read() if stream is not None else b""
        if not usable_charset(encoding):
            raise UnsupportedMediaType(media_type, f"Unsupported charset {encoding!r}; send UTF-8.")
        try:
            return json.loads(body.decode(encoding), object_pairs_hook=_object_without_duplicate_keys)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None
        except ValueError as error:
            raise ParseError(f"JSON parse error - {error}") from None
