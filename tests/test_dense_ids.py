"""The dense id map (docs/key-schema.md) against the run's real Redis: memory follows people, not
ids; an id is assigned once, on the write path's existing script call, and never reused."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest
from django.contrib.auth import get_user_model

from activity import calendar, clock
from activity.events import Event
from activity.models import RetentionCell
from activity.services import audience, backfill, cohorts, ingest, privacy, sweep
from activity.store import keys, lifetimes
from activity.store.scripts import LUA_DIR
from tests.redis_counts import CommandDelta
from tests.redis_probe import RoundTrips
from tests.traces import dense_id

BUDGET = 200  # bytes of long-lived Redis a new person may cost, whatever their id
SHAPES = {
    "MAX_ID of old": lambda n: str(67_108_864 + n),
    "near 2**63": lambda n: str(9_223_372_036_854_775_807 - n),
    "UUID": lambda n: str(uuid.UUID(int=n + 1)),
    "64 characters": lambda n: f"{n:064d}",
}


def long_lived(client) -> int:
    """Bytes the {au} families without a TTL hold (``MEMORY USAGE ... SAMPLES 0``: every field)."""
    found = (keys.dense_ids(), keys.dense_ids_next(), keys.first_day())
    return sum(client.memory_usage(key, samples=0) or 0 for key in found)


def record(users: list[str], ts: float) -> None:
    for start in range(0, len(users), 500):
        ingest.record_events([Event(user=user, ts=ts) for user in users[start : start + 500]])


@pytest.mark.parametrize("shape", SHAPES)
def test_a_new_person_costs_the_same_bounded_bytes_whatever_their_id(redis_client, at, shape):
    """Method: 5,000 warm-up people first (so the map is past its small encoding and its table's
    growth is amortized as on a real site), then 1,000 new people of one id shape, one event each;
    the delta of ``MEMORY USAGE`` of the long-lived {au} keys (the map, its counter, the first-day
    field), divided by 1,000, is at most ``BUDGET`` bytes. The day's, week's and month's bitmaps
    (which expire) hold a bit per person: their length follows the people, never an id's value."""
    now = clock.now()
    at(now)
    record([f"warm-{n}" for n in range(5000)], now)
    before = long_lived(redis_client)
    record([SHAPES[shape](n) for n in range(1000)], now)
    per_person = (long_lived(redis_client) - before) / 1000
    assert per_person <= BUDGET, per_person
    day = calendar.day_of(now)
    for period in calendar.PERIODS:
        bitmap = audience.store.BITS[calendar.PERIODS.index(period)](calendar.name_of(period, day))
        assert redis_client.strlen(bitmap) <= 6001 // 8 + 1
    assert audience.stats().active_day == 6000  # exact


def test_the_write_path_assigns_in_its_existing_calls_one_round_trip(redis_client, at):
    """A batch of new people of any id shape: the same round trip and the same script calls as a
    batch of people already mapped (the assignment is inside the call that sets their bits)."""
    for script in LUA_DIR.glob("*.lua"):  # loaded, so no NOSCRIPT recovery adds a trip
        redis_client.script_load(script.read_bytes())
    now = clock.now()
    at(now)
    users = [shape(n) for shape in SHAPES.values() for n in range(50)]
    ingest.record_events([Event(user="warm", ts=now)])
    calls = []
    for _ in range(2):  # new people, then the same people again
        with CommandDelta(redis_client) as delta, RoundTrips() as sent:
            ingest.record_events([Event(user=user, ts=now) for user in users])
        assert sent.count == 1
        calls.append(delta.calls["evalsha"])
    assert calls[0] == calls[1]
    assert sorted(dense_id(redis_client, user) for user in users) == list(range(2, 2 + len(users)))


@pytest.mark.django_db
def test_an_erased_person_s_id_is_never_reused(redis_client, at):
    """Erase drops the map entry; the person coming back after the tombstone gets a new id, and the
    old one is not given to anyone: a stale bit of theirs never counts for someone else."""
    now = clock.now()
    at(now)
    ingest.record_events([Event(user="gone", ts=now), Event(user="stays", ts=now)])
    old = dense_id(redis_client, "gone")
    privacy.erase("gone")
    assert dense_id(redis_client, "gone") is None
    ingest.record_events([Event(user="gone", ts=now), Event(user="newcomer", ts=now)])
    assert dense_id(redis_client, "gone") is None  # tombstoned: skipped, no id
    at(now + privacy.tombstone_ttl() + 1)
    ingest.record_events([Event(user="gone", ts=now + privacy.tombstone_ttl() + 1)])
    assert dense_id(redis_client, "gone") not in {None, old}
    assert old not in {dense_id(redis_client, user) for user in ("stays", "newcomer", "gone")}


@pytest.mark.django_db
def test_an_upgrade_misreads_no_old_key_and_the_backfill_rebuilds_first_days(redis_client, at):
    """Keys as the version that indexed by user id left them (bits at user ids, the first-day field,
    a group bitmap) and a cell the rollup stored: none is read as a dense id, the sweep gives the old
    long-lived keys a day, the rollup keeps the stored cell, and ``activity_backfill`` seeds first
    days (so cohorts) from the database, as the CHANGELOG says."""
    now = clock.now()
    at(now)
    today = calendar.day_of(now)
    leaving = today - timedelta(days=lifetimes.KEEP_DAYS)
    own = keys.prefix() + "{au}:"
    old_day, old_field, old_group = f"{own}bits:day:{calendar.day_name(today)}", f"{own}first-day", f"{own}group:1"
    redis_client.setbit(old_day, 1, 1)
    redis_client.expire(old_day, 86_400)
    redis_client.execute_command("BITFIELD", old_field, "SET", "u16", "#1", calendar.day_number(today))
    redis_client.setbit(old_group, 1, 1)
    stored = RetentionCell.objects.create(
        by="first_seen", period="day", cohort=leaving, offset=0, size=3, retained=3, time_zone=calendar.zone_name()
    )
    assert audience.stats().active_day == 0
    sweep.sweep()
    assert 0 < redis_client.ttl(old_field) <= sweep.DEFAULT_TTL and redis_client.ttl(old_group) > 0
    cohorts.keep_cells(today, now)
    assert RetentionCell.objects.get(pk=stored.pk).retained == 3  # not overwritten from an empty bitmap
    account = get_user_model().objects.create(
        username="before-upgrade", last_login=datetime.fromtimestamp(now - 3 * 86_400).astimezone()
    )
    backfill.backfill()
    found = cohorts.build(cohorts.Query(cohorts=4, periods=1), now)
    assert [row["size"] for row in found["cohorts"]] == [1, 0, 0, 0]
    assert dense_id(redis_client, str(account.pk)) == 1
