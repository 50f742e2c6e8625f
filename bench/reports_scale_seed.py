"""The reports bench's data (``bench.reports_scale``): N weekly viewers seeded through the service's
page-view path, the input only the old full-sort shapes read, and what the seeded keys weigh per
viewer (MEMORY USAGE). Apart from the loads, which run on what this writes."""

from __future__ import annotations

import random
import string
from datetime import timedelta

import redis

SEED_BATCH = 1000  # events per record_events call (ACTIVITY_MAX_BATCH)
UNION_DAYS = 30


def _views(rng: random.Random) -> int:
    """Page views of one viewer in the week: most view a page or two, a few many (ties and a tail)."""
    return min(1 + int(rng.expovariate(1.2) ** 2), 60)


def _username(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_lowercase, k=rng.randint(5, 12))) + str(rng.randrange(100))


def seed(viewers: int, now: float) -> int:
    """N viewers through ``ingest.record_events`` (the middleware's path: usernames known), so the
    top viewers, by-name indexes, uv counters, names and the day's, week's and month's active-user
    bitmaps all exist as traffic writes them. Returns the page views recorded."""
    from activity.events import Event
    from activity.services import ingest

    rng = random.Random(16)
    events: list[Event] = []
    names: dict[str, str] = {}
    recorded = 0
    for user_id in range(1, viewers + 1):
        user = str(user_id)
        names[user] = _username(rng)
        events += [Event(user, now, f"/page/{rng.randrange(2000)}") for _ in range(_views(rng))]
        if len(events) >= SEED_BATCH or user_id == viewers:
            recorded += ingest.record_events(events, names=names).accepted
            events, names = [], {}
    return recorded


def seed_old_shapes(raw: redis.Redis, viewers: int, now: float) -> None:
    """What only the old shapes read: the 29 days before today's active-user bitmaps (random bytes,
    ids up to N) and unique-visitor HyperLogLogs (copies of today's dense one: PFMERGE costs the
    same whatever a dense HLL holds), and the day's and week's viewer sets the old script wrote."""
    from activity import calendar
    from activity.store import keys

    today = calendar.day_of(now)
    width = viewers // 8 + 1
    rng = random.Random(30)
    for days_ago in range(1, UNION_DAYS):
        name = calendar.day_name(today - timedelta(days=days_ago))
        raw.setrange(keys.active_bits(name), 0, rng.randbytes(width))
        raw.copy(keys.unique_visitors(calendar.day_name(today)), keys.unique_visitors(name), replace=True)
    for period in ("day", "week"):
        viewer_set = old_viewers(calendar.period_name(period, today))
        pipe = raw.pipeline(transaction=False)
        for first in range(1, viewers + 1, 10_000):
            pipe.sadd(viewer_set, *range(first, min(first + 10_000, viewers + 1)))
        pipe.execute()


def drop_expired(raw: redis.Redis) -> int:
    """SCAN the keyspace once: Redis deletes each key past its TTL that SCAN meets. Left to its active
    expiry (hz 10), a million session lists past their window take about half an hour to go, and
    the phases would meet those deletions throughout. Returns how many keys went."""
    before = raw.dbsize()
    for _ in raw.scan_iter(count=1000):
        pass
    return before - raw.dbsize()


def old_viewers(period_key: str) -> str:
    """The old script's viewer set of a period (``{pv}:viewers:<period>``), named as the top viewers are."""
    from activity.store import keys

    return keys.top_viewers(period_key).replace(":top:", ":viewers:", 1)


def union_inputs(now: float) -> tuple[list[str], list[str]]:
    """The 30 daily active-user bitmaps and unique-visitor HLLs ending today."""
    from activity import calendar
    from activity.store import keys

    days = [calendar.day_name(calendar.day_of(now) - timedelta(days=n)) for n in range(UNION_DAYS)]
    return [keys.active_bits(day) for day in days], [keys.unique_visitors(day) for day in days]


def memory_per_viewer(raw: redis.Redis, viewers: int, now: float) -> dict[str, float]:
    """MEMORY USAGE (every element counted) of the week's top viewers (in all: their number is
    capped), by-name index and the old viewer set, per viewer."""
    from activity import calendar
    from activity.store import keys

    week = calendar.period_name("week", calendar.day_of(now))

    def per_viewer(key: str) -> float:
        return round(raw.memory_usage(key, samples=0) / viewers, 1)

    top_total = raw.memory_usage(keys.top_viewers(week), samples=0)
    index = per_viewer(keys.viewers_by_name(week))
    return {
        "top_viewers_members": raw.zcard(keys.top_viewers(week)),
        "top_viewers_total_bytes": top_total,
        "top_viewers_bytes": round(top_total / viewers, 1),
        "by_name_bytes": index,
        "new_bytes": round(top_total / viewers + index, 1),
        "old_viewer_set_bytes": per_viewer(old_viewers(week)),
    }
