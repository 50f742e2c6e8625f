"""Paging links: opaque keyset cursors for lists ordered by (ts desc, user desc), such as the online
list, and DRF-style ``page``/``page_size`` links for lists read one LRANGE page at a time."""

from __future__ import annotations

import base64
import json
import math
import re

from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.utils.urls import remove_query_param, replace_query_param

from activity.errors import InvalidValue
from activity.events import clean_user


def encode_cursor(ts: float, user: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([ts, user]).encode()).decode().rstrip("=")


# A cursor this service writes is base64url (unpadded) of JSON [ts, user]: under 120 characters.
# The bound keeps what reaches json.loads small, so no cursor can nest deep or carry a huge number.
CURSOR_PATTERN = "[A-Za-z0-9_-]+"
MAX_CURSOR_LENGTH = 200
_CURSOR_RE = re.compile(CURSOR_PATTERN)


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The (ts, user) of a cursor from ``encode_cursor``; ``InvalidValue`` for anything else,
    including a ts that is not a finite, non-negative JSON number (Redis would refuse it)."""
    if len(cursor) > MAX_CURSOR_LENGTH or not _CURSOR_RE.fullmatch(cursor):
        raise InvalidValue("Invalid cursor.")
    try:
        ts, user = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not 0 <= float(ts) < math.inf:
            raise InvalidValue("Invalid cursor.")
        return float(ts), clean_user(user)
    except (ValueError, TypeError, OverflowError):
        raise InvalidValue("Invalid cursor.") from None


def next_link(request: Request, ts: float, user: str) -> str:
    return replace_query_param(request.build_absolute_uri(), "cursor", encode_cursor(ts, user))


def page_links(request: Request, page: int, page_size: int, count: int) -> tuple[str | None, str | None]:
    """(next, previous) as DRF's PageNumberPagination builds them; 404 for a page past the last,
    as it answers too (page 1 of an empty list is a valid, empty page)."""
    if page > 1 and (page - 1) * page_size >= count:
        raise NotFound("Invalid page.")
    url = request.build_absolute_uri()
    following = replace_query_param(url, "page", page + 1) if page * page_size < count else None
    if page == 1:
        return following, None
    previous = remove_query_param(url, "page") if page == 2 else replace_query_param(url, "page", page - 1)
    return following, previous
