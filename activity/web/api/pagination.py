"""Paging links: keyset cursors for lists ordered by (ts desc, user desc), such as the online list,
and DRF-style ``page``/``page_size`` links for lists read a page at a time (a session's)."""

from __future__ import annotations

import re

from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.utils.urls import remove_query_param, replace_query_param

from activity.errors import InvalidValue
from activity.events import USER_ID_PATTERN


def encode_cursor(ts: float, user: str) -> str:
    """``<ts>_<user>``: the last row's position, the score as Python writes it back exactly."""
    return f"{ts!r}_{user}"


# Every cursor of this form is a position in the list, so the OpenAPI document's pattern is the
# whole rule: one that matches is answered, one that does not is a 400. A ts has no "_", so the
# first one ends it; it is written without an exponent (``repr`` of a score from 0.001 up).
CURSOR_PATTERN = rf"(0|[1-9][0-9]{{0,15}})(\.[0-9]{{1,20}})?_{USER_ID_PATTERN}"
MAX_CURSOR_LENGTH = 16 + 1 + 20 + 1 + 64
_CURSOR_RE = re.compile(CURSOR_PATTERN)


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The (ts, user) of a cursor of ``CURSOR_PATTERN``; ``InvalidValue`` for anything else."""
    if not _CURSOR_RE.fullmatch(cursor):
        raise InvalidValue("Invalid cursor: copy it from a next link.")
    ts, user = cursor.split("_", 1)
    return float(ts), user


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
