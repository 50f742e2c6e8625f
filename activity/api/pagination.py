"""Opaque keyset cursors for lists ordered by (ts desc, user desc), such as the online list."""

from __future__ import annotations

import base64
import json

from rest_framework.request import Request
from rest_framework.utils.urls import replace_query_param

from activity.events import InvalidValue, clean_user


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
