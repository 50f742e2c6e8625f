"""The service's Prometheus counters, served by ``activity.services.health``. A leaf module (imports
nothing of ours), so every layer, the store included, can count; with ``PROMETHEUS_MULTIPROC_DIR``
one scrape sums every process's counts."""

from __future__ import annotations

from prometheus_client import Counter

EVENTS_ACCEPTED = Counter("activity_events_accepted", "Events recorded (API, Celery task and middleware).")
EVENTS_REJECTED = Counter("activity_events_rejected", "Events in batches refused by validation (nothing written).")
REDIS_ROUND_TRIPS = Counter("activity_redis_round_trips", "Round trips to Redis (a pipeline counts once).")
REDIS_FAILURES = Counter(
    "activity_redis_failures", "Redis calls that failed because Redis could not serve.", ["reason"]
)
FAIL_OPEN_PAUSES = Counter("activity_fail_open_pauses", "Times the middleware paused tracking after a Redis failure.")
TRACK_DROPPED = Counter(
    "activity_track_dropped",
    "Tracked requests dropped unsent: past the batches' buffer, or in or behind a batch Redis refused.",
)
FLUSH_ROWS = Counter("activity_flush_rows_written", "Last-seen rows written to the database by the flush.")
REPORT_REBUILDS = Counter("activity_report_rebuilds", "Cached copies (reports, next-page picks) rebuilt.")
REPORT_STALE_SERVES = Counter(
    "activity_report_stale_serves", "Cached copies served stale while another client rebuilt them."
)
LIVE_STREAMS_OPENED = Counter("activity_live_streams_opened", "Live streams (GET /api/v1/live/) opened.")
LIVE_STREAMS_CLOSED = Counter(
    "activity_live_streams_closed", "Live streams ended: the client went away, or may no longer read them."
)
