"""Which reports exist, and when and by whom a copy is built (docs/sessions-reports.md).
``most-active`` is a cached copy (``services.cached``), rebuilt before it expires by the refresh job
while people read it. ``active-by-name`` lists every viewer, which no bounded copy could hold: it is
read from the by-name index, each read merging one slice of pending entries first and answering
``stale`` while some remain (the refresh job merges the rest)."""

from __future__ import annotations

from dataclasses import dataclass

from activity import calendar, clock, conf
from activity.errors import UnknownReport
from activity.schedule import REPORT_REFRESH_INTERVAL
from activity.services import cached
from activity.store import reports as store
from activity.store.client import get_client
from activity.store.keys import REPORT_READ_WINDOW

REPORT_PERIODS = ("day", "week")
STALE_S = 30  # a copy is kept this long past its freshness, served stale while one client rebuilds
WAIT_S = 5.0  # rebuild lock TTL; a reader without a copy waits up to twice this for the holder's build
TOP = 100  # rows of a ranked report (at most store.sessions.CANDIDATES)
# Pending by-name entries merged into the index per call (small, as a read merges one), and the
# calls per period of one refresh run.
MERGE_SLICE = 25
MERGE_SLICES_PER_RUN = 1000


@dataclass(frozen=True, slots=True)
class Report:
    """One report: ``ranked`` (the ``TOP`` most active, a cached copy) or not (every viewer by name,
    from the index)."""

    name: str
    description: str
    ranked: bool


REGISTRY: dict[str, Report] = {
    report.name: report
    for report in (
        Report(
            "most-active",
            "Users ranked by page views in the period (the local day, or ISO week with period=week), top N.",
            ranked=True,
        ),
        Report(
            "active-by-name",
            "Users with page views in the period, by username (A-Z; the user id when none is known).",
            ranked=False,
        ),
    )
}


@dataclass(frozen=True, slots=True)
class Policy:
    """The report settings in force, in the units the code uses."""

    ttl_ms: int  # fresh for this long after a build
    stale_ms: int  # kept this much longer, served as stale while one client rebuilds
    wait_s: float  # lock TTL, and how long a reader without a copy waits for the holder's build
    top: int  # rows kept by ``top`` reports
    read_window_s: int  # reports read this recently are kept fresh by the refresh job
    merge_slice: int  # pending by-name entries merged into the index per call
    merge_slices: int  # merge calls per period in one refresh run

    @classmethod
    def current(cls) -> Policy:
        return cls(
            ttl_ms=int(conf.settings.REPORT_TTL * 1000),
            stale_ms=int(STALE_S * 1000),
            wait_s=WAIT_S,
            top=TOP,
            read_window_s=REPORT_READ_WINDOW,
            merge_slice=MERGE_SLICE,
            merge_slices=MERGE_SLICES_PER_RUN,
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    generated_at: float
    expires_in: float  # seconds it stays fresh (0 when stale)
    fresh: bool
    count: int
    rows: list[dict[str, object]]


def catalogue() -> list[tuple[str, str]]:
    """(name, one-line description) of every report."""
    return [(report.name, report.description) for report in REGISTRY.values()]


def _report(name: str) -> Report:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownReport(name) from None


def _copy_of(report: Report, period_key: str) -> str:
    return f"{report.name}:{period_key}"


def _copy_id(report: Report, period: str, now: float) -> str:
    """The copy of ``report`` for the current ``period`` at ``now``: each day or week has its own."""
    return _copy_of(report, calendar.period_name(period, calendar.day_of(now)))


def copies_of(period_keys: list[str]) -> list[str]:
    """The ids of the ranked reports' copies of these periods (``d:YYYYMMDD`` / ``w:YYYYWww``)."""
    return [_copy_of(report, key) for report in REGISTRY.values() if report.ranked for key in period_keys]


def read_copy(report: Report, period: str, now: float, number: int, size: int, policy: Policy) -> Snapshot | None:
    """Page ``number`` of the stored copy (one round trip), or None when there is none."""
    first = (number - 1) * size
    found = store.read(
        get_client(), _copy_id(report, period, now), first, size, f"{report.name}:{period}", now, policy.read_window_s
    )
    if found is None:
        return None
    rows = [
        {"rank": first + index + 1, "user": user, "name": name or user, "views": int(views or 0)}
        for index, (user, name, views) in enumerate(found.rows)
    ]
    return Snapshot(
        generated_at=found.generated_at,
        expires_in=max(0, found.pttl_ms - policy.stale_ms) / 1000,
        fresh=found.pttl_ms > policy.stale_ms,
        count=found.count,
        rows=rows,
    )


def build_copy(report: Report, period: str, now: float, policy: Policy) -> None:
    """Run the report's SORT now, lock or not (``page`` calls it only behind the lock, or when no
    holder announced a build in time; ``bench/reports.py`` calls it bare as the naive cache)."""
    period_key = calendar.period_name(period, calendar.day_of(now))
    keep_ms = policy.ttl_ms + policy.stale_ms
    store.build_ranked(get_client(), _copy_id(report, period, now), period_key, policy.top, keep_ms, now)


def _read_index(period: str, now: float, number: int, size: int, policy: Policy) -> tuple[Snapshot, str]:
    """A page of the by-name index after merging one slice of its pending entries, and how it was
    served: ``hit`` when nothing is left pending (current as of now, so fresh for a report TTL like
    a new copy), else ``stale`` (the users still pending are missing; ``expires_in`` 0)."""
    first = (number - 1) * size
    found = store.read_by_name(get_client(), period, calendar.day_of(now), first, size, policy.merge_slice)
    rows = [
        {"rank": first + index + 1, "user": user, "name": name, "views": views}
        for index, (user, name, views) in enumerate(found.rows)
    ]
    current = found.pending == 0
    expires_in = policy.ttl_ms / 1000 if current else 0
    snapshot = Snapshot(generated_at=now, expires_in=expires_in, fresh=current, count=found.count, rows=rows)
    return snapshot, "hit" if current else "stale"


def merge_pending(period: str, now: float, policy: Policy) -> tuple[int, int]:
    """Merge the current ``period``'s pending by-name entries a slice a round trip, so no call holds
    Redis long, for at most ``policy.merge_slices`` calls; returns (merged, still pending)."""
    merged, pending, day = 0, 0, calendar.day_of(now)
    for _ in range(policy.merge_slices):
        found = store.merge_by_name(get_client(), period, day, policy.merge_slice)
        merged, pending = merged + found.merged, found.pending
        if pending == 0:
            break
    return merged, pending


def lock_name(report: Report, period: str, now: float) -> str:
    """The name of the lock guarding rebuilds of ``report``'s current copy."""
    return f"report:{_copy_id(report, period, now)}"


def _copy(report: Report, period: str, now: float, policy: Policy, number: int = 1, size: int = 50) -> cached.Copy:
    """The report's current copy as ``activity.services.cached`` serves and rebuilds it, read at page ``number``."""
    return cached.Copy(
        lock=lock_name(report, period, now),
        wait_s=policy.wait_s,
        stale_ms=policy.stale_ms,
        read=lambda: read_copy(report, period, now, number, size, policy),
        is_fresh=lambda found: found.fresh,
        pttl_ms=lambda: store.pttl_ms(get_client(), _copy_id(report, period, now)),
        build=lambda: build_copy(report, period, now, policy),
    )


def page(name: str, period: str = "day", number: int = 1, size: int = 50) -> tuple[Snapshot, str]:
    """Page ``number`` of a report and how it was served: ``hit`` (fresh copy, one round trip),
    ``stale`` (old copy while another client rebuilds) or ``miss`` (built now, by this reader or by
    the holder it waited for). Raises ``UnknownReport``."""
    report, policy, now = _report(name), Policy.current(), clock.now()
    if not report.ranked:
        return _read_index(period, now, number, size, policy)
    return cached.serve(_copy(report, period, now, policy, number, size))


def refresh() -> int:
    """Merge the current day's and week's pending by-name entries (bounded), then rebuild the
    reports read within ``REPORT_READ_WINDOW`` with under two refresh intervals of freshness left;
    returns how many were built. Safe beside another run: a rebuild takes the report's lock, and two
    merges only split the slices (each SPOP takes its own entries)."""
    policy, now = Policy.current(), clock.now()
    for period in REPORT_PERIODS:
        merge_pending(period, now, policy)
    margin_ms = 2 * REPORT_REFRESH_INTERVAL * 1000
    built = 0
    for marker in store.read_since(get_client(), now - policy.read_window_s):
        name, _, period = marker.rpartition(":")
        if name not in REGISTRY or period not in REPORT_PERIODS or not REGISTRY[name].ranked:
            continue
        copy = _copy(REGISTRY[name], period, now, policy)
        if cached.fresh_for_ms(copy) > margin_ms:
            continue
        built += cached.build_unless_fresh(copy, margin_ms) == "built"
    return built


def rebuild(name: str, period: str = "day") -> str:
    """The admin's "recompute now": ``built``, or ``busy`` when another client's rebuild holds the
    lock (that build is the recompute); a by-name report merges its pending entries instead, ``fresh``
    when none was pending. Raises ``UnknownReport``."""
    report, policy, now = _report(name), Policy.current(), clock.now()
    if not report.ranked:
        merged, _ = merge_pending(period, now, policy)
        return "built" if merged else "fresh"
    return cached.build_unless_fresh(_copy(report, period, now, policy), margin_ms=policy.ttl_ms)
