"""The dense id map (docs/key-schema.md): every person, whatever the shape of their user id, gets a
small integer once, and the ``{au}`` bitmaps (active users, cohorts, group members) and the
first-day field are indexed by it. So a bitmap costs a bit per person, not per possible id, and any
id (an integer of any size, a UUID, a string) is counted exactly.

The map is one hash, ``digest -> dense id``, the digest a fixed 12 bytes whatever the id's length.
One hash, not buckets: each script names the map in its KEYS, a fixed key, where buckets would make
KEYS grow with the batch (docs/key-schema.md has the figures)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from activity.store import keys
from activity.store.client import PER_CALL, Client, Reply, chunks
from activity.store.scripts import LuaScript, Pipeline

ASSIGN = LuaScript("actives_record")
DIGEST_BYTES = 12  # 96 bits: odds of any collision among a billion people about 1 in 10^11


def digest(user: str) -> bytes:
    """The fixed-size name of ``user`` in the map (and in ``{au}``'s tombstones)."""
    return hashlib.blake2b(user.encode(), digest_size=DIGEST_BYTES, person=b"act:dense").digest()


def queue_assign(
    pipe: Pipeline, digests: Sequence[bytes], now: float, bitmaps: Sequence[tuple[str, int]] = ()
) -> Reply:
    """Queue one ``actives_record`` call giving each person a dense id (the one they have, or the
    next) and setting their bit in each of ``bitmaps`` (key, TTL; at most 3); tombstoned people are
    skipped. Returns its reply: the dense ids in ``digests`` order (0: skipped), once the pipeline has run."""
    script_keys = [keys.tombstones("au"), keys.dense_ids(), keys.dense_ids_next(), *(key for key, _ in bitmaps)]
    return pipe.script(ASSIGN, script_keys, [repr(now), *(ttl for _, ttl in bitmaps), *digests])


def assign(client: Client, users: Sequence[str], now: float) -> dict[str, int]:
    """Each user's dense id, assigned where they have none (users of the site's database: a bounded
    set), ``PER_CALL`` per script call, one round trip. Tombstoned users are left out."""
    pipe = client.pipeline(transaction=False)
    shares = list(chunks(users, PER_CALL))
    calls = [queue_assign(pipe, [digest(user) for user in share], now) for share in shares]
    pipe.execute()
    found: dict[str, int] = {}
    for share, call in zip(shares, calls, strict=True):
        found.update((user, int(dense)) for user, dense in zip(share, call.value, strict=True) if int(dense))
    return found
