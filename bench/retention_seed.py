"""The retention bench's bitmaps (``bench.retention``): what a million people leave over the
retention windows, written straight into the service's keys, and what they weigh per user and day
(MEMORY USAGE). Apart from the builds and the write path, which run on what this writes."""

from __future__ import annotations

import random
from array import array
from datetime import date, timedelta

import redis


def _bitmap(width: int) -> bytearray:
    return bytearray(width)


def seed(raw: redis.Redis, users: int, today: date) -> dict[int, date]:
    """Write the retention windows' bitmaps of ``users`` people (dense ids 1..N); returns each
    one's first day."""
    from activity import calendar
    from activity.store import keys, lifetimes

    rng = random.Random(37)
    width = users // 8 + 1
    cohort_days = [today - timedelta(days=n) for n in range(lifetimes.COHORT_KEEP_DAYS + 1)]
    first_bits = {day: _bitmap(width) for day in cohort_days}
    field = array("H", bytes(2 * (users + 1)))
    firsts: dict[int, date] = {}
    for user in range(1, users + 1):
        day = cohort_days[rng.randrange(len(cohort_days))]
        first_bits[day][user >> 3] |= 0x80 >> (user & 7)
        field[user] = calendar.day_number(day)
        firsts[user] = day
    if field.itemsize == 2 and array("H", [1]).tobytes() == b"\x01\x00":
        field.byteswap()  # BITFIELD u16 is big-endian
    pipe = raw.pipeline(transaction=False)
    pipe.set(keys.first_day(), field.tobytes())
    for day, bits in first_bits.items():
        pipe.set(keys.first_active(calendar.day_name(day)), bytes(bits))
        moved = _bitmap(width)
        for user in [users, *rng.sample(range(1, users), 20)]:
            moved[user >> 3] |= 0x80 >> (user & 7)
        pipe.set(keys.first_moved(calendar.day_name(day)), bytes(moved))
        if len(pipe) >= 40:
            pipe.execute()
    active_days = [today - timedelta(days=n) for n in range(lifetimes.KEEP_DAYS + 1)]
    weeks = {calendar.week_name(day - timedelta(days=7 * n)) for day in (today,) for n in range(7)}
    months = {calendar.month_name(day) for day in active_days}
    for day in active_days:
        pipe.set(keys.active_bits(calendar.day_name(day)), rng.randbytes(width))
    for week in weeks:
        pipe.set(keys.active_bits_week(week), rng.randbytes(width))
    for month in months:
        pipe.set(keys.active_bits_month(month), rng.randbytes(width))
    pipe.execute()
    return firsts


def memory_per_user(raw: redis.Redis, users: int, today: date) -> dict[str, float]:
    """Bytes per user and day of the active bitmaps (a day's, plus its share of a week's and a
    month's) and of the cohort bitmaps (a day's first-active and moved), and per user of the
    first-day field."""
    from activity import calendar
    from activity.store import keys, lifetimes

    yesterday = calendar.day_name(today - timedelta(days=1))

    def usage(key: str) -> int:
        return int(raw.memory_usage(key, samples=0) or 0)

    active = usage(keys.active_bits(yesterday))
    active += usage(keys.active_bits_week(calendar.week_name(today))) / 7
    active += usage(keys.active_bits_month(calendar.month_name(today))) / 30
    cohort = usage(keys.first_active(yesterday)) + usage(keys.first_moved(yesterday))
    return {
        "active_bitmaps_per_user_day_bytes": round(active / users, 3),
        "cohort_bitmaps_per_user_day_bytes": round(cohort / users, 3),
        "cohort_bitmaps_days_kept": lifetimes.COHORT_KEEP_DAYS + 1,
        "active_day_bitmaps_days_kept": lifetimes.KEEP_DAYS + 1,
        "first_day_field_per_user_bytes": round(usage(keys.first_day()) / users, 3),
    }
