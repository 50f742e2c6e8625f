"""The page-view path with transitions counted against without, side by side in one run.

``python -m bench.transitions``: the whole ``ingest.record_events`` of page views (the one round
trip a tracked page costs: last seen, the page-view script, visitors, actives), with
``ACTIVITY_TRANSITIONS`` on and off, in interleaved rounds on one private Redis. Returning users
browse a site of a few hundred pages with live sessions, so nearly every view is a transition and
the pages' next-page sets are full (trims included). Two shapes: one view per call (a tracked
request) and batches of 100 (ingest). Reported: views per second and Redis-side microseconds per
view (INFO commandstats, EVALSHA), and the cost ratio on / off; the issue's target is at most +10%.
Written to bench/results/transitions.json and .md.
"""

from __future__ import annotations

import argparse
import random
import statistics
from typing import Any

from bench import harness
from bench.harness import markdown

TARGET = 1.10  # transitions on may cost at most 10% more than off


def _commands(client) -> dict[str, tuple[int, int]]:
    """(calls, microseconds) of each command so far, those run from scripts included."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): (row["calls"], row["usec"]) for name, row in stats.items()}


def _added(after: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]]) -> dict[str, list[int]]:
    return {
        name: [calls - before.get(name, (0, 0))[0], usec - before.get(name, (0, 0))[1]]
        for name, (calls, usec) in after.items()
    }


def per_view(totals: dict[str, dict[str, list[int]]], views: int) -> dict[str, dict[str, float]]:
    """Each command's calls and Redis microseconds per view in each state, those that ran in either."""
    names = sorted(set(totals["on"]) | set(totals["off"]))
    return {
        name: {
            f"{state}_{what}": totals[state].get(name, [0, 0])[at] / views
            for state in ("on", "off")
            for at, what in enumerate(("calls", "us"))
        }
        for name in names
        if any(totals[state].get(name, [0, 0])[0] for state in ("on", "off"))
    }


def breakdown(commands: dict[str, dict[str, float]]) -> list[list[str]]:
    """The commands whose calls or time per view the counting changes, the most added time first,
    then what EVALSHA adds beyond them (its time holds that of the commands its scripts run): the
    scripts' own Lua and the reading of their arguments. The bench's own INFO is left out."""
    head = ["command", "calls a view, off", "on", "Redis us a view, off", "on", "added us a view"]
    moved = [
        (name, row)
        for name, row in commands.items()
        if name != "info"
        and (abs(row["on_calls"] - row["off_calls"]) >= 0.005 or abs(row["on_us"] - row["off_us"]) >= 0.05)
    ]
    moved.sort(key=lambda item: item[1]["off_us"] - item[1]["on_us"])
    rows = [
        [
            f"`{name.upper()}`",
            *(f"{row[key]:.3f}" for key in ("off_calls", "on_calls")),
            *(f"{row[key]:.2f}" for key in ("off_us", "on_us")),
            f"{row['on_us'] - row['off_us']:+.2f}",
        ]
        for name, row in moved
    ]
    inside = sum(row["on_us"] - row["off_us"] for name, row in moved if name != "evalsha")
    evalsha = commands.get("evalsha", {"on_us": 0.0, "off_us": 0.0})
    rest = evalsha["on_us"] - evalsha["off_us"] - inside
    label = "the scripts' own Lua and arguments (`EVALSHA` less the commands above)"
    return [head, *rows, [label, "", "", "", "", f"{rest:+.2f}"]]


def paired(on: list[float], off: list[float]) -> float:
    """The median of the per-round ratios on / off."""
    return statistics.median(a / b for a, b in zip(on, off, strict=True))


def run(users: int, pages: int, views_per_round: int, batch: int, rounds: int) -> dict[str, dict[str, float]]:
    """Per shape (single / batched): views/s and Redis us/view of each state (medians), and the
    medians of the per-round on / off ratios. Each round runs both states back to back on the same
    kind of traffic, in alternating order, so load from other tenants hits both alike."""
    from django.test import override_settings

    from activity import clock
    from activity.events import Event
    from activity.services import ingest
    from activity.store.client import get_client

    client = get_client()
    rng = random.Random(19)
    site = [f"/page/{n}" for n in range(pages)]
    popularity = [1 / (1 + n) for n in range(pages)]  # a few pages draw most views, as on real sites

    def views(count: int) -> list[Event]:
        now = clock.now()
        return [Event(f"u{rng.randrange(users)}", now, path) for path in rng.choices(site, weights=popularity, k=count)]

    def measure(calls: list[list[Event]], enabled: bool) -> tuple[float, dict[str, list[int]]]:
        """Seconds to record ``calls``, and each command's calls and Redis microseconds meanwhile."""
        with override_settings(ACTIVITY_TRANSITIONS=enabled):
            before = _commands(client)
            seconds = harness.timed(
                lambda: [ingest.record_events(chunk, day_writes=ingest.PROCESS_DAY_WRITES) for chunk in calls]
            )
            return seconds, _added(_commands(client), before)

    # Warm: every user has a live session and the next-page sets are full before timing starts.
    for _ in range(2 * users // 1000 + 1):
        ingest.record_events(views(1000))
    found: dict[str, dict[str, Any]] = {}
    for shape, size in (("single", 1), ("batched", batch)):
        samples: dict[str, list[float]] = {name: [] for name in ("on_s", "off_s", "on_us", "off_us")}
        totals: dict[str, dict[str, list[int]]] = {"on": {}, "off": {}}
        for round_number in range(rounds + 1):  # round 0 warms the shape up and is not kept
            order = (True, False) if round_number % 2 else (False, True)
            for enabled in order:
                seconds, commands = measure([views(size) for _ in range(views_per_round // size)], enabled)
                if round_number:
                    state = "on" if enabled else "off"
                    samples[f"{state}_s"].append(seconds / views_per_round)
                    samples[f"{state}_us"].append(commands.get("evalsha", [0, 0])[1] / views_per_round)
                    for name, added in commands.items():
                        total = totals[state].setdefault(name, [0, 0])
                        total[0], total[1] = total[0] + added[0], total[1] + added[1]
        found[shape] = {
            "commands": per_view(totals, rounds * views_per_round),
            "on_views_per_s": 1 / statistics.median(samples["on_s"]),
            "off_views_per_s": 1 / statistics.median(samples["off_s"]),
            "on_redis_us_per_view": statistics.median(samples["on_us"]),
            "off_redis_us_per_view": statistics.median(samples["off_us"]),
            "wall_ratio": paired(samples["on_s"], samples["off_s"]),
            "redis_ratio": paired(samples["on_us"], samples["off_us"]),
        }
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--views", type=int, default=2000, help="views per state per round")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=21, help="paired rounds; medians are reported")
    args = parser.parse_args()
    server = harness.start("benchtr:")
    try:
        found = run(args.users, args.pages, args.views, args.batch, args.rounds)
    finally:
        server.stop()
    table = [["page views", "transitions", "views/s", "Redis us/view", "cost on / off (wall)", "Redis on / off"]]
    for shape, label in (("single", "1 per call (a tracked request)"), ("batched", f"{args.batch} per call (ingest)")):
        row = found[shape]
        for state in ("on", "off"):
            table.append(
                [
                    label,
                    state,
                    f"{row[f'{state}_views_per_s']:,.0f}",
                    f"{row[f'{state}_redis_us_per_view']:.1f}",
                    f"{row['wall_ratio']:.3f}x" if state == "on" else "",
                    f"{row['redis_ratio']:.3f}x" if state == "on" else "",
                ]
            )
    met = all(row["wall_ratio"] <= TARGET for row in found.values())
    notes = (
        f"{args.rounds} paired rounds of {args.views:,} views per state (on and off back to back, order "
        f"alternating); views/s and us/view are medians, ratios the medians of the per-round ratios. "
        f"{args.users:,} returning users over {args.pages} pages (weights 1/rank), sessions live, next-page sets "
        f"full and churning (a long tail). Redis us/view: EVALSHA time per view (the page-view script and the "
        f"call's last-seen, visitor and active-user scripts). Target: transitions add at most "
        f"{TARGET - 1:.0%} to the page-view path's cost (wall time per view): {'met' if met else 'not met'}. "
        f"Command: `python -m bench.transitions`.\n\n"
        f"Where the added Redis time of the {args.batch}-view calls goes (INFO commandstats over the kept "
        f"rounds, per view; commands run from the scripts included, and in `EVALSHA`'s time):\n\n"
        + markdown(breakdown(found["batched"]["commands"]))
    )
    harness.write("transitions", {"args": vars(args), "results": found, "target": TARGET, "met": met}, table, notes)


if __name__ == "__main__":
    main()
