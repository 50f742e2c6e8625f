"""The chaos run, short (``bench.chaos.SHORT``): three faults on real processes under load, every
acknowledged event reconciled with what Redis and the database hold after the flush.

Redis SIGKILLed (AOF everysec), granian's graceful reload (SIGHUP) and a Celery worker SIGKILLed
holding a flush claim: each loses nothing beyond its budget (the reload and the Celery kill nothing
at all), no batch is ever half-written, and once the fault is over the database holds every event
acknowledged by then within two flush intervals. The rig is the bench's own: granian, a persistent
private Redis, a broker Redis, a Celery worker and beat, SQLite in a temporary directory (never the
run's database, whatever ``DATABASE_URL`` says)."""

from __future__ import annotations

import time

import pytest

from bench.chaos import FLUSH_INTERVAL, SHORT, chaos

pytestmark = pytest.mark.celery


def test_a_short_chaos_run_loses_nothing_beyond_each_faults_budget_and_catches_up():
    started = time.monotonic()
    phases = chaos(SHORT, pages_per_phase=1500)
    assert [phase.fault for phase in phases] == list(SHORT)
    for phase in phases:
        report = phase.summary()
        assert phase.acknowledged_api > 100 and phase.acknowledged_pages > 20, report  # the load ran
        assert phase.half_written == 0, report
        assert not phase.beyond_budget, report
        if phase.fault != "redis-sigkill":
            assert phase.lost == [], report
        assert phase.behind_s <= 2 * FLUSH_INTERVAL, report
    assert time.monotonic() - started < 90
