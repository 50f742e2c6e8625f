"""Ingest calls made idempotent by a key: an API caller's ``Idempotency-Key``, or a Celery task's id.
The first answer is kept ``RECORD_TTL``; a repeat with the same body gets it back and writes
nothing; another body under the same key is refused; a repeat while the first may still be running
is told to come back. The batch's page views are written once whatever is retried, lost or late
(how: ``activity.store.idempotency``). Without a key, nothing of this runs: no command, no key."""

from __future__ import annotations

import hashlib
import json
import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from activity import clock, conf
from activity.errors import InvalidValue, KeyInUse, KeyReused
from activity.store import idempotency as store
from activity.store.client import get_client
from activity.store.idempotency import Fence

RECORD_TTL = 24 * 3600
MAX_KEY_LENGTH = 255
# The claim's lease, in ACTIVITY_REDIS_TIMEOUTs: longer than an attempt's round trips take (the
# claim, the batch, a group update, the answer), so a live attempt is not taken over. Correctness
# does not hang on it (the fence does that): it only says how long a repeat is answered 409.
LEASE_TIMEOUTS = 4
MIN_LEASE_S = 1.0


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: dict[str, Any]
    replayed: bool  # the kept answer of an earlier attempt, not this one's


def clean_key(value: str) -> str:
    """``value`` if it may be an idempotency key: 1-255 printable ASCII characters (space to ~)."""
    if not 1 <= len(value) <= MAX_KEY_LENGTH:
        raise InvalidValue(f"Must be 1 to {MAX_KEY_LENGTH} characters long.")
    if not all(" " <= char <= "~" for char in value):
        raise InvalidValue("Must be printable ASCII characters only.")
    return value


def lease_seconds() -> float:
    return max(MIN_LEASE_S, LEASE_TIMEOUTS * conf.settings.REDIS_TIMEOUT)


def once(caller: str, key: str, request: Any, run: Callable[[Fence], dict[str, Any]], status: int = 202) -> Answer:
    """``status`` and ``run(fence)``'s body, or the answer kept for ``key`` of ``caller`` (a scope:
    keys of two callers never meet). ``request`` is what the answer depends on (JSON-able); the same key with another
    raises ``KeyReused``. ``KeyInUse`` (with the seconds to wait) while another attempt holds the
    key, or when one took it over from this attempt while it ran (its writes then counted once,
    by one of the two). Costs two round trips besides ``run``'s: the claim and the answer."""
    client, lease, token = get_client(), lease_seconds(), secrets.token_hex(16)
    held, fence = store.begin(client, record_name(caller, key), digest(request), token, clock.now(), lease, RECORD_TTL)
    if held[0] == "conflict":
        raise KeyReused("This Idempotency-Key was used with another request body.")
    if held[0] == "running":
        raise KeyInUse(math.ceil(float(held[1])))
    if held[0] == "answered":
        return Answer(int(held[1]), json.loads(held[2]), replayed=True)
    kept = store.finish(client, fence, status, _canonical(run(fence)), RECORD_TTL)
    if kept is None:
        raise KeyInUse(math.ceil(lease))
    return Answer(int(kept[1]), json.loads(kept[2]), replayed=kept[0] != "kept")


def record_name(caller: str, key: str) -> str:
    """What names the record of ``key`` of ``caller``: a digest, so a key's characters never reach a
    Redis key name and every record name has the same length."""
    return hashlib.sha256(f"{caller}\0{key}".encode()).hexdigest()[:32]


def digest(request: Any) -> str:
    """The digest of ``request`` that tells a repeat from another body: of its canonical JSON, so the
    same content sent with other spacing or key order is the same request."""
    return hashlib.sha256(_canonical(request).encode()).hexdigest()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
