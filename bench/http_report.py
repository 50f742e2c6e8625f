"""``bench.http``'s reading of its runs: each case's medians and ratios with their intervals, the
serving targets met or not, the ceilings the reads show, gunicorn beside granian, and the tables
and notes written to ``bench/results/http.{json,md}``. Apart from the measuring (``bench.http``),
which only gathers the samples this reads."""

from __future__ import annotations

import statistics
from typing import Any

from bench import harness
from bench.harness import markdown
from bench.web import PARTIES, Case, Sample

API_CASES = ("post_", "last_seen", "online")  # read against DRF's floor too
READS = ("floor_read", "drf_read")  # the floors after one Redis read, nothing else
# The floors each case is read against. A case runs right after fresh runs of its floors, so each
# ratio compares runs seconds apart: this machine's neighbours change its speed by 2x within a minute.
REFERENCES = {
    "floor_signed_in": ("floor",),
    "drf_floor": ("floor",),
    "floor_read": ("floor",),
    "drf_read": ("floor", "drf_floor"),
    "page_anonymous": ("floor",),
    "page_signed_in": ("floor", "floor_signed_in"),
}
API_REFERENCES = ("floor", "drf_floor")
LAST_SEEN_TARGET = 0.70  # the serving target, against the floor

Samples = dict[str, list[Sample]]
Ratios = dict[tuple[str, str], list[float]]


def references(key: str) -> tuple[str, ...]:
    return REFERENCES.get(key, API_REFERENCES if key.startswith(API_CASES) else ())


def summarize(all_cases: list[Case], samples: Samples, ratios: Ratios) -> dict[str, dict[str, Any]]:
    """Each case's medians over all its runs (CPU per party included), and the median of its ratios
    to each of its floors with a 90% interval for it."""
    rows = {}
    for case in all_cases:
        runs = samples[case.key]
        rate = statistics.median(s.rate for s in runs)
        p50, p99 = statistics.median(s.p50_ms for s in runs), statistics.median(s.p99_ms for s in runs)
        tails = [s.p99_ms / s.p50_ms for s in runs]  # each run's, like the rates' ratios
        versus = {ref: statistics.median(ratios[(case.key, ref)]) for ref in references(case.key)}
        interval = {ref: harness.median_interval(ratios[(case.key, ref)]) for ref in references(case.key)}
        metered = [s.cpu_us for s in runs if s.cpu_us]
        cpu = {party: statistics.median(m[party] for m in metered) for party in PARTIES} if metered else None
        rows[case.key] = {
            "case": case.name,
            "requests_per_s": rate,
            "events_per_s": rate * case.events if case.events else None,
            "p50_ms": p50,
            "p99_ms": p99,
            "p99_over_p50": statistics.median(tails),
            "p99_over_p50_interval_90": [round(bound, 3) for bound in harness.median_interval(tails)],
            "vs_floor": versus.get("floor", 1.0),
            "vs_signed_in_floor": versus.get("floor_signed_in"),
            "vs_drf_floor": versus.get("drf_floor"),
            "interval_90": {ref: [round(low, 3), round(high, 3)] for ref, (low, high) in interval.items()},
            "cpu_us_per_request": cpu,
            "requests_per_s_each_run": [round(s.rate, 1) for s in runs],
        }
    return rows


def targets(rows: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets against this run's figures; a ratio's also against its 90% interval
    (``harness.median_interval``): clear of the run's noise only when the whole interval is on one
    side (for the tails, every case's interval: the table shows the one reaching highest)."""

    def ratio(name: str, key: str, ref: str, bound: float) -> dict[str, Any]:
        measured = rows[key]["vs_signed_in_floor" if ref == "floor_signed_in" else "vs_floor"]
        low, high = rows[key]["interval_90"][ref]
        return {
            "target": name,
            "measured": measured,
            "met": measured >= bound,
            "unit": "x",
            "interval_90": [low, high],
            "interval_verdict": harness.verdict(low, high, bound),
        }

    batch = max(("post_100", "post_1000"), key=lambda key: rows[key]["events_per_s"])
    events = rows[batch]["events_per_s"]
    result = [
        ratio("POST 1 event >= 0.60x floor", "post_1", "floor", 0.60),
        ratio("tracked page >= 0.90x untracked, anonymous", "page_anonymous", "floor", 0.90),
        ratio("tracked page >= 0.90x untracked, signed in", "page_signed_in", "floor_signed_in", 0.90),
        {
            "target": f"batched ingest >= 60,000 events/s ({rows[batch]['case'][22:]})",
            "measured": events,
            "met": events >= 60_000,
            "unit": "",
        },
        ratio(f"GET last-seen >= {LAST_SEEN_TARGET:.2f}x floor", "last_seen", "floor", LAST_SEEN_TARGET),
    ]
    over = [row["case"] for row in rows.values() if row["p99_over_p50"] > 3]
    worst = max(row["p99_over_p50"] for row in rows.values())
    widest = max(rows.values(), key=lambda row: row["p99_over_p50_interval_90"][1])  # the one that decides
    low, high = widest["p99_over_p50_interval_90"]
    any_over = any(row["p99_over_p50_interval_90"][0] > 3 for row in rows.values())
    label = f"p99 <= 3x p50 in every case ({len(over)} of {len(rows)} over{': ' + '; '.join(over) if over else ''})"
    result.append(
        {
            "target": label,
            "measured": worst,
            "met": not over,
            "unit": "x",
            "interval_90": [low, high],
            "interval_case": widest["case"],
            "interval_verdict": "met" if high <= 3 else "not met" if any_over else "within the noise",
        }
    )
    return result


def ceilings(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the stack allows an API read, against the floor: one Redis read in the bare view, the same
    in the bare DRF view (no API view that reads Redis can answer faster), and GET last-seen; and
    whether GET last-seen's target lies above the ceiling's whole 90% interval (then DRF and the one
    round trip alone answer slower than the target asks, before any of the service's own steps)."""
    shown = {key: rows[key] for key in (*READS, "last_seen")}
    ceiling = shown["drf_read"]["interval_90"]["floor"]
    return {
        "rows": [
            {"case": row["case"], "vs_floor": row["vs_floor"], "interval_90": row["interval_90"]["floor"]}
            for row in shown.values()
        ],
        "last_seen_of_ceiling": shown["last_seen"]["vs_floor"] / shown["drf_read"]["vs_floor"],
        "target_above_ceiling": ceiling[1] < LAST_SEEN_TARGET,
    }


def compare(
    reference: dict[str, list[Sample]], other: dict[str, list[Sample]], rows: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Another server's rate per case, and the reference server's as a multiple of it with a 90% interval
    (the median of the runs' ratios: each pair ran in the same place in the schedule, one after the other)."""
    found = {}
    for key in reference:
        ratios = [x.rate / y.rate for x, y in zip(reference[key], other[key], strict=True)]
        found[key] = {
            "requests_per_s": statistics.median(s.rate for s in other[key]),
            "p99_ms": statistics.median(s.p99_ms for s in other[key]),
            "reference_over_this": statistics.median(ratios),
            "interval_90": [round(bound, 3) for bound in harness.median_interval(ratios)],
            "reference_requests_per_s": rows[key]["requests_per_s"],
        }
    return found


def versus(
    rows: dict[str, dict[str, Any]], compared: dict[str, dict[str, Any]], ours: str, theirs: str
) -> list[list[str]]:
    """The table of ``compare``'s figures: each case's rate here and there, and ours over theirs."""
    table = [["case", f"{ours} req/s", f"{theirs} req/s", f"{ours} / {theirs} (90% interval)", f"{theirs} p99 ms"]]
    for key, row in compared.items():
        table.append(
            [
                rows[key]["case"],
                fmt(row["reference_requests_per_s"]),
                fmt(row["requests_per_s"]),
                "{:.2f}x ({:.2f}x-{:.2f}x)".format(row["reference_over_this"], *row["interval_90"]),
                fmt(row["p99_ms"], 1),
            ]
        )
    return table


def fmt(value: float | None, digits: int = 0) -> str:
    return "" if value is None else f"{value:,.{digits}f}"


def cpu_table(rows: dict[str, dict[str, Any]]) -> list[list[str]] | None:
    """Each case's CPU microseconds per request by party, their total, and that total over the floor's."""
    if any(row["cpu_us_per_request"] is None for row in rows.values()):
        return None
    table = [
        ["case", "server, user us", "server, kernel us", "Redis us", "wrk us", "total us", "vs floor's", "cores busy"]
    ]
    floor = sum(rows["floor"]["cpu_us_per_request"].values())
    for row in rows.values():
        cpu = row["cpu_us_per_request"]
        total = sum(cpu.values())
        busy = total * row["requests_per_s"] / 1e6
        parties = [fmt(cpu[party]) for party in PARTIES]
        table.append([row["case"], *parties, fmt(total), f"{total / floor:.2f}x", f"{busy:.2f}"])
    return table


def report(rows: dict[str, dict[str, Any]], results: dict[str, Any]) -> None:
    table = [["case", "req/s", "events/s", "p50 ms", "p99 ms", "p99/p50", "vs floor"]]
    for key, row in rows.items():
        ratio = f"{row['vs_floor']:.2f}x"
        if key == "page_signed_in":
            ratio += f" ({row['vs_signed_in_floor']:.2f}x signed-in floor)"
        if row["vs_drf_floor"] is not None:
            ratio += f" ({row['vs_drf_floor']:.2f}x DRF floor)"
        table.append(
            [
                row["case"],
                fmt(row["requests_per_s"]),
                fmt(row["events_per_s"]),
                fmt(row["p50_ms"], 1),
                fmt(row["p99_ms"], 1),
                f"{row['p99_over_p50']:.1f}",
                ratio,
            ]
        )
    goals = [["target", "measured", "met", "90% interval of the median", "by the interval"]]
    for goal in results["targets"]:
        measured = f"{goal['measured']:.2f}x" if goal["unit"] == "x" else fmt(goal["measured"])
        interval = "{:.2f}x-{:.2f}x".format(*goal["interval_90"]) if "interval_90" in goal else ""
        if "interval_case" in goal:
            interval += f" ({goal['interval_case']})"
        verdict = goal.get("interval_verdict", "")
        goals.append([goal["target"], measured, "yes" if goal["met"] else "no", interval, verdict])
    allowed = [["what the stack allows an API read", "vs floor", "90% interval of the median"]]
    for row in results["ceilings"]["rows"]:
        allowed.append([row["case"], f"{row['vs_floor']:.2f}x", "{:.2f}x-{:.2f}x".format(*row["interval_90"])])
    above = results["ceilings"]["target_above_ceiling"]
    cpu = cpu_table(rows)
    commands = ", ".join(f"{key} {per:.1f}" for key, per in results["redis_commands_per_request"].items())
    notes = (
        f"granian (ASGI, `project/serving.py`), {results['workers']} workers, DEBUG off, SQLite, private "
        f"redis-server; wrk with 1 thread and {results['connections']} connections on loopback, "
        f"{results['seconds']} s per run, medians of {results['rounds']} interleaved rounds (wrk and the server "
        "share the machine's cores). Each case runs right after its floors, and a ratio is the median of those "
        "adjacent pairs' ratios (the machine's speed drifts by 2x within a minute); p99/p50 is the median of each "
        "run's. A median's 90% interval is read from the order statistics of its runs' values, whatever their "
        "distribution: a target is met or not beyond the run's noise only when the whole interval is on one side of "
        "its line. Ingest events carry a user and no "
        "time (the server stamps it, so every request moves last seen). Redis commands run per request (inside "
        f"scripts included): {commands}. Command: `python -m bench.http{results['flags']}`.\n\n" + markdown(goals)
    )
    notes += (
        "\n\nThe reads (the floors after one Redis read through the service, the ZSCORE GET last-seen makes, and "
        "nothing else) show what the stack itself allows: the bare DRF view with that read is the ceiling of any API "
        f"view that reads Redis. GET last-seen reaches {results['ceilings']['last_seen_of_ceiling']:.2f}x of it; "
        f"its target, {LAST_SEEN_TARGET:.2f}x the floor, is "
        + (
            "above the ceiling's whole interval: DRF and one Redis read alone answer slower than that on this "
            "machine, before any authentication, permission, throttle or tracking."
            if above
            else "within or below the ceiling's interval."
        )
        + "\n\n"
        + markdown(allowed)
    )
    if cpu:
        notes += (
            "\n\nWhere each request's CPU goes (medians over the case's runs): the server's processes in user space "
            "and in the kernel (the workers' tracking threads included), redis-server, and wrk; read from /proc, "
            "Redis's INFO and wrk's rusage around each run. The cores busy are the total times the rate: where the "
            "machine's cores are saturated, a case's rate follows its CPU per request.\n\n" + markdown(cpu)
        )
    if "gunicorn" in results:
        notes += (
            f"\n\ngunicorn {results['gunicorn_version']} (gthread, the same workers, 1 thread each: "
            "`make run`'s server before granian), interleaved with the runs above (`--with-gunicorn`). "
            "A ratio over 1 is granian faster:\n\n" + markdown(versus(rows, results["gunicorn"], "granian", "gunicorn"))
        )
    if "against" in results:
        commit = results["against_commit"]
        notes += (
            f"\n\nThe same cases against the service at `{commit}` (another checkout, its own redis-server, "
            "this checkout's bench), interleaved with the runs above (`--against`). A ratio over 1 is this "
            "checkout faster:\n\n" + markdown(versus(rows, results["against"], "this checkout", commit))
        )
    harness.write("http", results, table, notes)
