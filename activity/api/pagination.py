"""Paging links: opaque keyset cursors for lists ordered by (ts desc, user desc), such as the online
list, and DRF-style ``page``/``page_size`` links for lists read one LRANGE page at a time."""

from __future__ import annotations

import base64
import json

from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.utils.urls import remove_query_param, replace_query_param

from activity.errors import InvalidValue
from activity.events import clean_user


def encode_cursor(ts: float, user: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([ts, user]).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        ts, user = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return float(ts), clean_user(user)
    except (ValueError, TypeError, InvalidValue):
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
