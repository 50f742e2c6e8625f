"""``GET /metrics``: the Prometheus text exposition of the service's counters and flush gauges.

In multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set, as ``make run`` does) one scrape of any web
worker sums every process's counters, Celery's included. Flush backlog and lag are read from Redis
at scrape time (one round trip), never kept in a process.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector

from activity import flush


class FlushCollector(Collector):
    """Flush backlog and lag as gauges, read from Redis when scraped."""

    def collect(self) -> Iterator[Metric]:
        status = flush.status()
        yield GaugeMetricFamily("activity_flush_backlog", "Users whose last seen waits for the flush.", status.backlog)
        yield GaugeMetricFamily("activity_flush_lag_seconds", "Age of the oldest change not yet flushed.", status.lag)


def exposition() -> bytes:
    """Every process's counters in multiprocess mode (this process's otherwise), then the flush
    gauges read now."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        counters = CollectorRegistry()
        multiprocess.MultiProcessCollector(counters)
    else:
        counters = REGISTRY
    gauges = CollectorRegistry()
    gauges.register(FlushCollector())
    return generate_latest(counters) + generate_latest(gauges)
