"""A chaos run that reconciles every acknowledged event (``python -m bench.chaos``).

The example project runs as ``make run`` serves it, on loopback: granian (``serve()``, two
workers), a persistent private Redis for the store (AOF ``everysec`` and RDB, ``PrivateRedis(data_dir=...)``),
a throwaway private Redis for Celery's broker and results (apart, as docs/loss-budget.md advises),
a real Celery worker and beat flushing every 5 s, and SQLite (or ``DATABASE_URL``). Steady load
runs through each phase: batches of events POSTed to the API, each event a unique canary user with
its ``ts`` (acknowledged: 202), and signed-in pages, each from a user of its own (acknowledged: 200).
Each fault of the loss budget is applied in turn while the load runs; then the load stops, the flush
drains, and three sets are compared: the acknowledged canaries, what Redis holds, what the database
holds. A canary acknowledged and missing from the database is lost; each fault names the canaries it
may lose (its budget), and a run is within budget when every lost canary is one of those and no
batch was half-written (some of its canaries kept, others not). From the fault's end the database is
polled for the canaries acknowledged by then: how far the flush was behind is the time it took to
hold every one of them that it ever holds.

The Celery processes run ``tests.celery_app``, the project's app with a 0.3 s pause after each flush
claims its first batch, so a worker killed "mid-flush" is killed holding a claim.
Writes ``bench/results/chaos.json`` and ``.md`` (docs/loss-budget.md includes the table).

The rig's processes are in ``bench/chaos_rig.py``, the load in ``bench/chaos_load.py``, the faults
in ``bench/chaos_faults.py``; this module runs the phases, reconciles them and writes the table.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from bench import chaos_probe, chaos_retries, harness
from bench.chaos_faults import FAULTS, FULL, MARGIN, SHORT, Context
from bench.chaos_load import API_BATCH, INTERVAL, THREADS, Load
from bench.chaos_probe import Probe
from bench.chaos_rig import FLUSH_INTERVAL, POLL, Rig, rig
from bench.harness import PrivatePostgres

LEAD, TAIL = 1.0, 1.5  # seconds of load before a fault and after it has ended


# --- a phase and its reconciliation ------------------------------------------------------------


@dataclass
class Phase:
    fault: str
    name: str
    budget: str
    acknowledged_api: int
    acknowledged_pages: int
    refused: int  # requests answered otherwise (503...) or not at all
    missing_in_redis: int  # acknowledged, not in Redis after the phase
    lost: list[str]  # acknowledged, not in the database after the flush
    lost_pages: int  # of which pages
    allowed: int  # canaries the fault may lose
    beyond_budget: list[str]  # lost and not allowed
    half_written: int  # batches some of whose canaries were kept, others not
    refused_but_kept: int  # batches answered otherwise whose canaries were all kept
    lost_at: list[float]  # when each lost canary was acknowledged, seconds after the fault began
    behind_s: float  # from the fault's end until the database held every canary acknowledged by then
    drain_s: float
    seconds: float
    note: str
    retries: dict[str, Any]  # the retrying clients' figures (bench.chaos_retries), if the fault had them

    @property
    def within_budget(self) -> bool:
        return not self.beyond_budget and self.half_written == 0

    def summary(self) -> dict[str, Any]:
        found = {k: v for k, v in self.__dict__.items() if k not in ("lost", "beyond_budget")}
        return {**found, "lost": len(self.lost), "beyond_budget": self.beyond_budget[:20], "within": self.within_budget}


@dataclass
class CatchUp:
    """Polled from a fault's end: when the database first held each canary acknowledged by then."""

    probe: Probe
    since: float  # the fault's end (epoch seconds)
    waiting: set[str]
    last: float | None = None  # when the last one it holds so far was first seen there

    def poll(self) -> None:
        with contextlib.suppress(RuntimeError):  # the database away
            found = self.probe.ask("db", users=sorted(self.waiting)) if self.waiting else {}
            if found:
                self.waiting -= found.keys()
                self.last = time.time()

    def behind(self) -> float:
        """Seconds from the fault's end until the database held every one it ever holds (the lost left out)."""
        return max(0.0, (self.last or self.since) - self.since)


def run_phase(rig: Rig, key: str, consts: dict[str, Any], token: str, pages: deque[tuple[str, str]]) -> Phase:
    """Load, the fault, more load; then the flush drains and the three sets are compared."""
    assert rig.probe is not None
    fault = FAULTS[key]
    load = Load(rig.port, token, pages).start()
    started = time.monotonic()
    try:
        time.sleep(LEAD)
        marks = fault.apply(Context(rig, consts, lambda: list(load.sent)))
        acked = {c for one in list(load.sent) if one.acknowledged and one.answered <= marks.ended for c in one.canaries}
        catch_up, tail_end = CatchUp(rig.probe, marks.ended, acked), time.monotonic() + TAIL
        while time.monotonic() < tail_end:
            catch_up.poll()
            time.sleep(POLL)
    finally:
        sent = load.stop()
    seconds = time.monotonic() - started
    drained = rig.drain(catch_up.poll)
    # The next phase starts once the web workers' tracking has resumed after this fault's back-off.
    time.sleep(max(0.0, marks.ended + consts["backoff"] + MARGIN - time.time()))
    everyone = [c for one in sent for c in one.canaries]
    held = rig.probe.ask("read", users=everyone)
    in_redis, in_db = held["redis"], held["db"]
    acked = [one for one in sent if one.acknowledged]
    canaries = {c: one for one in acked for c in one.canaries}
    kept = {c for c, one in canaries.items() if c in in_db and (one.kind == "page" or in_db[c] >= one.ts - 0.001)}
    lost = sorted(set(canaries) - kept)
    allowed = marks.allowed(sent)
    half = refused_kept = 0
    for one in sent:
        if one.kind != "api":
            continue
        present = sum(c in in_db for c in one.canaries)
        half += 0 < present < len(one.canaries)
        refused_kept += not one.acknowledged and present == len(one.canaries)
    return Phase(
        fault=key,
        name=fault.name,
        budget=fault.budget,
        acknowledged_api=sum(len(one.canaries) for one in acked if one.kind == "api"),
        acknowledged_pages=sum(1 for one in acked if one.kind == "page"),
        refused=len(sent) - len(acked),
        missing_in_redis=sum(c not in in_redis for c in canaries),
        lost=lost,
        lost_pages=sum(canaries[c].kind == "page" for c in lost),
        allowed=len(allowed & set(canaries)),
        beyond_budget=sorted(set(lost) - allowed),
        half_written=half,
        refused_but_kept=refused_kept,
        lost_at=sorted(round(canaries[c].answered - marks.began, 3) for c in lost)[:50],
        behind_s=round(catch_up.behind(), 1),
        drain_s=round(drained, 1),
        seconds=round(seconds, 1),
        note=marks.note,
        retries=marks.retries,
    )


def chaos(
    faults: tuple[str, ...],
    pages_per_phase: int = 1000,
    lifetime: int | None = None,
    database_url: str | None = None,
    postgres: bool = False,
) -> list[Phase]:
    """Run ``faults`` in turn on one rig; each phase's reconciliation."""
    with rig(lifetime, database_url, postgres) as running:
        assert running.probe is not None
        prepared = running.probe.ask("prepare", pages=pages_per_phase * len(faults))
        consts = {"batch_ms": prepared["batch_ms"], "backoff": prepared["backoff"], "token": prepared["token"]}
        pages = deque((user, session) for user, session in prepared["pages"])
        phases = []
        for key in faults:
            phase = run_phase(running, key, consts, prepared["token"], pages)
            print(
                f"[chaos] {phase.name}: {phase.acknowledged_api} events + {phase.acknowledged_pages} pages "
                f"acknowledged, {len(phase.lost)} lost ({phase.allowed} allowed), "
                f"{'within' if phase.within_budget else 'BEYOND'} budget, behind {phase.behind_s:.1f} s; {phase.note}",
                flush=True,
            )
            phases.append(phase)
        return phases


def table(phases: list[Phase]) -> list[list[str]]:
    rows = [
        [
            "fault",
            "acknowledged (events + pages)",
            "not acknowledged",
            "lost (events + pages)",
            "budget",
            "within budget",
            "behind by",
        ]
    ]
    for p in phases:
        lost = f"{len(p.lost) - p.lost_pages:,} + {p.lost_pages:,}" + (
            f" (half-written batches: {p.half_written})" if p.half_written else ""
        )
        rows.append(
            [
                p.name,
                f"{p.acknowledged_api:,} + {p.acknowledged_pages:,}",
                f"{p.refused:,}",
                lost,
                f"{p.allowed:,}" if p.budget == "0" else f"{p.allowed:,} ({p.budget})",
                "yes" if p.within_budget else "**no**",
                f"{p.behind_s:.1f} s ({p.behind_s / FLUSH_INTERVAL:.1f} intervals)",
            ]
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--short", action="store_true", help=f"only {', '.join(SHORT)} (the suite's run)")
    parser.add_argument("--only", help=f"comma-separated faults of {', '.join(FAULTS)}")
    parser.add_argument("--sqlite", action="store_true", help="SQLite even where a private PostgreSQL could start")
    args = parser.parse_args()
    if args.probe:
        chaos_probe.main()
        return
    faults = tuple(args.only.split(",")) if args.only else SHORT if args.short else FULL
    database_url = os.environ.get("DATABASE_URL")
    postgres = not database_url and not args.sqlite and PrivatePostgres.available()
    if postgres and not args.only and not args.short:
        faults += ("postgres-restart",)
    started = time.monotonic()
    # The workers' lifetime ends about when the phases before the recycle have run.
    lifetime = 60 if "granian-lifetime" in faults else None
    phases = chaos(faults, lifetime=lifetime, database_url=database_url, postgres=postgres)
    elapsed = time.monotonic() - started
    if postgres:
        database = "a private PostgreSQL 15"
    else:
        database = "PostgreSQL" if (database_url or "").startswith("postgres") else "SQLite"
    notes = (
        f"One run of `python -m bench.chaos` ({elapsed:.0f} s), on loopback: granian (2 workers) as `make run` "
        f"serves it, a persistent private Redis (AOF everysec, RDB), the broker on a Redis of its own, a real "
        f"Celery worker and beat flushing every {FLUSH_INTERVAL} s, {database}. Load in each phase: {THREADS} "
        f"threads POSTing batches of {API_BATCH} events (each event a canary user of its own; acknowledged: "
        f"202) and {THREADS} asking for a signed-in page (each a member of its own; acknowledged: 200), a "
        f"request every {INTERVAL * 1000:.0f} ms each; {LEAD:g} s before the fault, {TAIL:g} s after it ended. Not "
        "acknowledged: the API's 503s while Redis refused, and the few requests whose keep-alive connection a "
        "stopping web worker closed. Lost: acknowledged and not in the database once the flush has drained. "
        "Budget: how many of the phase's canaries the fault may lose, and which ones; within budget: every "
        "lost canary is one of them, and no batch was half-written. Redis away + back-off: pages answered "
        f"from a batch time and {MARGIN:g} s before the fault until {MARGIN:g} s after the tracking back-off "
        "(`FAIL_OPEN_BACKOFF`, 5 s) that follows Redis answering again: the middleware fails open, dropping "
        "and counting what Redis refused. Each flush pauses 0.3 s after its first claim, so a kill or a database "
        f"restart lands mid-flush. Behind by: from the fault's end (the Celery kill's: another worker ready) "
        "until the database held every canary acknowledged by then that it ever holds, polled every "
        f"{POLL:g} s, in seconds and in flush intervals ({FLUSH_INTERVAL} s here, 10 s by default; the flush's "
        "lock lives 0.8 of one): even with no fault, the last events before it wait up to an interval."
    )
    results = {
        "seconds": round(elapsed, 1),
        "database": database,
        "flush_interval": FLUSH_INTERVAL,
        "phases": [p.summary() for p in phases],
    }
    retried = "".join(f"\n\n{chaos_retries.table(p.retries)}" for p in phases if p.retries)
    harness.write("chaos", results, table(phases), notes + retried)


if __name__ == "__main__":
    main()
