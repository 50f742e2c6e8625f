"""What ``/healthz`` and ``/metrics`` report. Flush backlog and lag are read from Redis at scrape
time, never kept in a process, so any worker's scrape is current."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from django.db import DatabaseError, transaction
from prometheus_client import CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector

from activity import clock
from activity.errors import StoreUnavailable
from activity.models import UserActivity
from activity.services import flush
from activity.store import health as store
from activity.store.client import get_client

logger = logging.getLogger("activity.health")


def redis_config() -> dict[str, str]:
    """The store Redis's settings the system checks judge; raises StoreUnavailable when it does not
    answer at ``REDIS_URL``."""
    return store.server_config(get_client())


def require_redis() -> None:
    """Raise ``StoreUnavailable`` unless Redis takes a write now (``/healthz``'s probe): asked by a
    job before its first database write, so a Redis that cannot serve leaves the database as it was."""
    store.probe(get_client(), clock.now())


def status() -> dict[str, str]:
    """``ok`` or the error for each part the service needs (Redis, the database); on a Redis
    Cluster also ``redis_cluster``, the cluster's state."""
    parts: dict[str, str] = {}
    try:
        state = store.probe(get_client(), clock.now())
        parts["redis"] = "ok"
        if state is not None:
            parts["redis_cluster"] = state
    except StoreUnavailable as error:
        logger.error("healthz: Redis unavailable: %s", error, exc_info=error)
        parts["redis"] = f"unavailable: {error}"
    try:
        # A query that reads the service's table: SELECT 1 answers even when that table cannot be
        # read (an SQLite file locked by a writer, a missing migration). The savepoint keeps a
        # failure from breaking an enclosing transaction.
        with transaction.atomic():
            UserActivity.objects.exists()
        parts["database"] = "ok"
    except DatabaseError as error:
        logger.error("healthz: database unavailable: %s", error, exc_info=error)
        parts["database"] = f"unavailable: {error}"
    return parts


class FlushCollector(Collector):
    """Flush backlog and lag as gauges, read from Redis when scraped."""

    def collect(self) -> Iterator[Metric]:
        found = flush.status()
        yield GaugeMetricFamily("activity_flush_backlog", "Users whose last seen waits for the flush.", found.backlog)
        yield GaugeMetricFamily("activity_flush_lag_seconds", "Age of the oldest change not yet flushed.", found.lag)


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
