"""Active users per day, ISO week and month: a bitmap indexed by integer user id (exact), plus a
HyperLogLog for ids that are not small integers.

Each activity is written into its day's, week's and month's keys at once (``lua/actives_record.lua``,
which skips erased users while they are tombstoned), so a period's figure is one count. A bitmap is
counted in ranges of ``COUNT_CHUNK_BYTES`` (BITCOUNT start end), so no command's work grows with the
id space.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from datetime import date

from activity.calendar import PERIODS, name_of
from activity.store import keys
from activity.store.daily import dated_keys, live_days
from activity.store.scripts import LuaScript, Pipeline

BITS = (keys.active_bits, keys.active_bits_week, keys.active_bits_month)
HLLS = (keys.active_hll, keys.active_hll_week, keys.active_hll_month)
COUNT_CHUNK_BYTES = 1 << 20  # one BITCOUNT reads at most 1 MiB (8M ids)
ACTIVES_RECORD = LuaScript("actives_record")


def bitmap_offset(user: str, max_id: int) -> int | None:
    """The bit of an integer user id (canonical decimal, 0..max_id), or None to count it by HLL."""
    if not user.isdigit() or (len(user) > 1 and user[0] == "0"):
        return None
    offset = int(user)
    return offset if offset <= max_id else None


def queue_actives(pipe: Pipeline, actives: Collection[tuple[str, date]], now: float, max_id: int) -> None:
    """Queue one EVALSHA per day of the batch: SETBIT (integer ids) or PFADD (other ids) into the
    active-user keys of the day, its week and its month."""
    bits: dict[date, set[int]] = defaultdict(set)
    others: dict[date, set[str]] = defaultdict(set)
    ttls = live_days(actives, now)
    for user, day in actives:
        if day not in ttls:
            continue
        offset = bitmap_offset(user, max_id)
        if offset is None:
            others[day].add(user)
        else:
            bits[day].add(offset)
    for day in bits.keys() | others.keys():
        bitmaps, hlls = dated_keys(BITS, day, now), dated_keys(HLLS, day, now)
        script_keys = [keys.tombstones("au"), *(key for key, _ in bitmaps), *(key for key, _ in hlls)]
        offsets = sorted(bits[day])
        args = [repr(now), *(ttl for _, ttl in bitmaps), len(offsets), *offsets, *sorted(others[day])]
        pipe.script(ACTIVES_RECORD, script_keys, args)


def queue_active(pipe: Pipeline, period: str, day: date, max_id: int) -> list[int]:
    """Queue the reads whose replies sum to the active users of the ``day``, ``week`` or ``month``
    holding ``day``: BITCOUNT of the bitmap in bounded byte ranges, and PFCOUNT of the HLL."""
    index = PERIODS.index(period)
    name = name_of(period, day)
    first = len(pipe)
    bitmap = BITS[index](name)
    for start in range(0, max_id // 8 + 1, COUNT_CHUNK_BYTES):
        pipe.bitcount(bitmap, start, start + COUNT_CHUNK_BYTES - 1)
    pipe.pfcount(HLLS[index](name))
    return list(range(first, len(pipe)))
