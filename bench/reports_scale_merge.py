"""The reports bench's by-name merge (``bench.reports_scale``): the pending entries the seed's page
views left, merged into the indexes as the service merges them, each call's Redis time measured.
Apart from the loads: it runs once, after the seed and before them, timed by INFO commandstats."""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from typing import Any

import redis


def _evalsha_us(raw: redis.Redis) -> int:
    return raw.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0)


def merge_pending(raw: redis.Redis, now: float) -> dict[str, Any]:
    """Merge every pending by-name entry of the day and the week into their indexes as the service
    does (``reports.merge_pending``, one slice of ``reports.MERGE_SLICE`` per call), each
    call timed by the INFO commandstats that follows it: Redis us per merged entry, the median,
    p99 and slowest call, and MEMORY USAGE per pending entry of the week's set before it drains."""
    from activity import calendar
    from activity.services import reports
    from activity.store import keys

    policy = replace(reports.Policy.current(), merge_slices=1)  # one call per merge_pending
    week = calendar.period_name("week", calendar.day_of(now))
    pending_key = keys.viewers_by_name_pending(week)
    waiting = raw.scard(pending_key)
    pending_bytes = raw.memory_usage(pending_key, samples=0) / waiting if waiting else 0.0
    calls_us: list[int] = []
    merged = 0
    started = time.monotonic()
    for period in ("day", "week"):
        pending = 1
        while pending:
            before = _evalsha_us(raw)
            moved, pending = reports.merge_pending(period, now, policy)
            calls_us.append(_evalsha_us(raw) - before)
            merged += moved
    quantiles = statistics.quantiles(calls_us, n=100, method="inclusive") if len(calls_us) > 1 else calls_us * 99
    result = {
        "entries": merged,
        "calls": len(calls_us),
        "slice": policy.merge_slice,
        "index_members": raw.zcard(keys.viewers_by_name(week)),
        "us_per_entry": round(sum(calls_us) / merged, 2) if merged else 0.0,
        "median_call_us": statistics.median(calls_us),
        "p99_call_us": quantiles[98],
        "slowest_call_us": max(calls_us),
        "pending_bytes_per_entry": round(pending_bytes, 1),
        "wall_s": round(time.monotonic() - started, 1),
    }
    print("by-name merge", result)
    return result
