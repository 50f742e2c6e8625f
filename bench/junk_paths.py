"""Memory per distinct junk path: what a crawler inventing URLs adds to a day's page statistics.

``python -m bench.junk_paths``: for each path length, one crawler's session views ``--paths``
distinct paths of that many characters, 1,000 a call of ``ingest.record_events`` (the write path the
API and the middleware use), on a private Redis. Each new path is one member of the day's views per
path (``{paths:<n>}:by-path:<day>``, in its partition of the paths) and, as the step from the
crawler's previous page, one member of the day's transitions (``{ses}:next:<day>``) and of their
index (``{ses}:next-index:<day>``). Then ``MEMORY USAGE ... SAMPLES 0`` (every member counted) of
those keys, divided by the paths: bytes per distinct path, each family's share. The paths stay under
the caps, so nothing is trimmed; the most a day can hold is then the caps times those shares
(``store.sessions.MAX_PATHS_PER_DAY``, shared by the partitions, and ``MAX_TRANSITIONS_PER_DAY``,
each with its slack), extrapolated, not measured. The page-view keys are counted too: a fixed set,
whatever the paths. Written to bench/results/junk_paths.json and .md.
"""

from __future__ import annotations

import argparse

from bench import harness

BATCH = 1000  # events per call, the API's largest batch


def junk(n: int, length: int) -> str:
    """The ``n``-th junk path, exactly ``length`` characters (at least 12)."""
    head = f"/junk/{n}/"
    return head + "x" * (length - len(head))


def run(lengths: list[int], paths: int) -> dict[str, dict[str, float]]:
    """Per length: bytes of the day's views per path (its partitions' keys) and transitions, bytes
    per path, keys under the prefix."""
    from activity import clock
    from activity.calendar import day_name, day_of
    from activity.events import Event
    from activity.services import ingest
    from activity.store import families, keys
    from activity.store import sessions as sessions_store
    from activity.store.client import get_client

    client = get_client()
    found: dict[str, dict[str, float]] = {}
    for length in lengths:
        for key in list(client.scan_iter(match=families.sweep_pattern(), count=1000)):
            client.delete(key)
        day = day_name(day_of(clock.now()))
        partitions = range(sessions_store.PATH_PARTITIONS)
        names = {
            "paths": [keys.path_views(partition, day) for partition in partitions],
            "transitions": [keys.transitions(day)],
            "index": [keys.transitions_index(day)],
        }
        for start in range(0, paths, BATCH):
            now = clock.now()
            ingest.record_events([Event("crawler", now, junk(n, length)) for n in range(start, start + BATCH)])
        members = {name: sum(map(client.zcard, found)) for name, found in names.items()}
        assert members == {"paths": paths, "transitions": paths - 1, "index": paths - 1}, members  # none trimmed
        usage = {name: sum(client.memory_usage(key, samples=0) or 0 for key in found) for name, found in names.items()}
        row: dict[str, float] = {f"{name}_bytes": usage[name] for name in names}
        row |= {f"{name}_per_path": usage[name] / members[name] for name in names}
        row["per_path"] = sum(usage.values()) / paths
        tags = [f"{keys.prefix()}{tag}:" for tag in (keys.SESSIONS_TAG, keys.PV_TAG)] + [f"{keys.prefix()}{{paths:"]
        row["keys"] = sum(1 for tag in tags for _ in client.scan_iter(match=f"{tag}*", count=1000))
        row["next_keys"] = sum(1 for _ in client.scan_iter(match=f"{tags[0]}next*", count=1000))
        share = sessions_store.MAX_PATHS_PER_DAY // sessions_store.PATH_PARTITIONS
        max_paths = len(partitions) * (share + sessions_store.paths_slack(share))
        max_steps = sessions_store.MAX_TRANSITIONS_PER_DAY + sessions_store.TRANSITIONS_PER_DAY_SLACK
        row["day_bound_bytes"] = row["paths_per_path"] * max_paths + max_steps * (
            row["transitions_per_path"] + row["index_per_path"]
        )
        row["max_paths"], row["max_steps"] = max_paths, max_steps
        found[str(length)] = row
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", type=int, default=5000, help="distinct paths per length")
    parser.add_argument("--lengths", type=int, nargs="+", default=[20, 200, 2048], help="characters per path")
    args = parser.parse_args()
    server = harness.start("benchjp:")
    try:
        found = run(args.lengths, args.paths)
    finally:
        server.stop()
    table = [
        [
            "path length",
            "bytes per distinct path",
            "views per path",
            "transitions",
            "transition index",
            "page-view keys (next:*)",
            "a day at the caps",
        ]
    ]
    for length, row in found.items():
        table.append(
            [
                f"{int(length):,} characters",
                f"{row['per_path']:,.0f}",
                f"{row['paths_per_path']:,.0f}",
                f"{row['transitions_per_path']:,.0f}",
                f"{row['index_per_path']:,.0f}",
                f"{row['keys']:.0f} ({row['next_keys']:.0f})",
                f"{row['day_bound_bytes'] / 2**20:,.1f} MiB",
            ]
        )
    any_row = next(iter(found.values()))
    caps = f"{any_row['max_paths']:,.0f} paths and {any_row['max_steps']:,.0f} steps"
    notes = " ".join(
        [
            f"{args.paths:,} distinct paths per length, viewed by one crawler in calls of {BATCH:,} events",
            "(`ingest.record_events`), none trimmed. Bytes: `MEMORY USAGE key SAMPLES 0` of the day's views per",
            "path, transitions and transition index, per member (a path is one member of each: the step to it",
            "from the crawler's previous page), summed per path. Page-view keys: every `{ses}`, `{pv}` and",
            "`{paths:<n>}` key after the run (the crawler's session, name and counters, the day's and week's",
            "statistics, each partition's page counts), `next:*` the",
            f"transition keys among them, the same whatever the paths. A day at the caps: {caps} (each cap plus",
            "its slack) times the per-member bytes, extrapolated; each day is kept `ACTIVITY_PAGE_STATS_DAYS`.",
            f"Command: `python -m bench.junk_paths --paths {args.paths} --lengths {' '.join(map(str, args.lengths))}`.",
        ]
    )
    harness.write("junk_paths", {"args": vars(args), "results": found}, table, notes)


if __name__ == "__main__":
    main()
