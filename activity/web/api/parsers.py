"""JSON parsing that rejects what the stdlib would guess at, and lets the serializers name the field
holding NaN or Infinity; orjson parses whatever it provably parses the same way."""

from __future__ import annotations

import codecs
import json
import re
from collections import Counter
from collections.abc import Mapping
from typing import IO, Any

import orjson
from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


def _object_without_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict; a key given twice is an error (the stdlib would keep the last one, so
    ``{"ts": "bad", "ts": 1}`` would pass validation on a value the client may not have meant)."""
    found = dict(pairs)
    if len(found) != len(pairs):
        duplicate = next(key for key, count in Counter(key for key, _ in pairs).items() if count > 1)
        raise ValueError(f"duplicate key {duplicate!r} in an object")
    return found


# What orjson would read differently or what the key count below cannot see: JSON whitespace
# between a string and a colon (a key written ``"a" :``), and a run of 20 digits (orjson reads an
# integer past 64 bits as a float; the stdlib keeps it an integer).
_LEFT_TO_STDLIB = re.compile(rb'"[ \t\n\r]+:|[0-9]{20}')


def fast_parse(body: bytes) -> Any | None:
    """orjson's parse of a UTF-8 body when it provably equals the stdlib parser's below; None to
    leave the body to that parser (which also gives the error messages).

    orjson keeps the last of a key given twice, silently. So each key is counted: with no
    ``\\u`` escape and no space before a colon, every key ends in the two bytes ``":`` and
    strings hold that pair the same way before and after a round trip through orjson, so a body
    holding more of them than its re-encoding lost a key given twice. NaN, Infinity and bodies
    nested past orjson's limits fail in orjson and go to the stdlib too.
    """
    if b"\\u" in body or _LEFT_TO_STDLIB.search(body):
        return None
    try:
        data = orjson.loads(body)
        again = orjson.dumps(data)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):  # the encoder nests less deep
        return None
    return data if body.count(b'":') == again.count(b'":') else None


class EventJSONParser(JSONParser):
    """DRF's JSON parser, stricter on structure and lenient on the NaN/Infinity literals.

    - NaN/Infinity are parsed (DRF's strict mode rejects the whole body with a bare "JSON parse
      error"), so ``ts`` validation can answer "events.3.ts: Must be a finite number." instead.
    - A key repeated in one object, and a body nested too deeply for the parser's recursion, are 400
      "JSON parse error - ..." like any other malformed body.
    """

    def parse(self, stream: IO[bytes], media_type: str | None = None, parser_context: Mapping | None = None) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        body = stream.read() if stream is not None else b""
        if codecs.lookup(encoding).name == "utf-8":
            data = fast_parse(body)
            if data is not None:
                return data
        try:
            return json.loads(body.decode(encoding), object_pairs_hook=_object_without_duplicate_keys)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None
        except ValueError as error:
            raise ParseError(f"JSON parse error - {error}") from None
