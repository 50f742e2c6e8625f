"""What funnels cost the write path (docs/funnels.md): Redis CPU per page view with no funnel and
with 20 (half sequential, half strict), side by side; the recording process's own CPU per view (it
advances the people's states); and the bytes their state takes.

Three sets of ``--users`` signed-in users browse a site of 200 pages, one page view each per round
through ``ingest.record_events`` in batches of 1,000, rounds 10 s apart, each view's page drawn by
popularity (Zipf: the k-th page k times less viewed than the first). One set browses while no
funnel is defined; one while 20 are whose 3 to 5 steps are among the 50 most viewed pages (pricing,
sign-up, checkout: most views match a step); one while 20 are whose steps are any of the pages.
Windows of an hour, a prefix step (``/p/1*``) now and then. The sets run interleaved, round after
round, so all see the same load; Redis's own CPU (INFO used_cpu_user + used_cpu_sys) per page view
gives each, and their ratio to no funnel is what the issue bounds (at most 1.25). The definitions
come in through ``funnels.read_definitions`` (the service's own seam), so no database is needed.
Then MEMORY USAGE of the funnels' keys.

    python -m bench.funnels                           # 20,000 users a set, 5 rounds
    python -m bench.funnels --users 2000 --rounds 2   # seconds

Writes bench/results/funnels.json and .md.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections import Counter
from datetime import UTC, datetime

from bench import harness
from bench.capacity import cpu_seconds, memory_by_family

BATCH = 1000
FUNNELS = 20
PAGES = 200
STEP_PAGES = 50  # funnels' steps are among the most viewed pages: pricing, sign-up, checkout
WINDOW = 3600
ROUND_S = 10  # seconds of the bench's clock between two rounds
STATE_FAMILY = "{fn:<partition>}:states:<generation>"


def site_funnels(rng: random.Random, created: float, pages: int, first_id: int) -> list:
    """Twenty funnels over the site's ``pages`` most viewed pages, 3 to 5 steps each, a prefix step
    now and then."""
    from activity.models import Funnel

    defined = []
    for n in range(first_id, first_id + FUNNELS):
        steps = [f"/p/{rng.randrange(pages)}" for _ in range(rng.randint(3, 5))]
        if n % 4 == 0:
            steps[-1] = f"/p/{rng.randrange(1, 3)}*"
        defined.append(
            Funnel(
                id=n,
                name=f"funnel {n}",
                steps=steps,
                window=WINDOW,
                mode="strict" if n % 2 else "sequential",
                created=datetime.fromtimestamp(created, UTC),
            )
        )
    return defined


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20_000, help="users in each of the three sets")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    os.environ["ACTIVITY_REDIS_TIMEOUT"] = "30"
    server = harness.start("bench:")
    try:
        run(options.users, options.rounds)
    finally:
        server.stop()


def run(users: int, rounds: int) -> None:
    from activity import calendar, clock
    from activity.events import Event
    from activity.services import funnels, ingest
    from activity.store import funnels as funnel_store
    from activity.store import keys, lifetimes
    from activity.store.client import get_client

    rng = random.Random(20261129)
    moment = [clock.now()]
    clock.now = lambda: moment[0]
    client = get_client()
    popular = site_funnels(rng, moment[0] - 60, STEP_PAGES, 1)
    anywhere = site_funnels(rng, moment[0] - 60, PAGES, FUNNELS + 1)
    popularity = [1 / (k + 1) for k in range(PAGES)]

    def views(first: int) -> list[Event]:
        pages = rng.choices(range(PAGES), popularity, k=users)
        return [Event(user=str(first + n), ts=moment[0], path=f"/p/{page}") for n, page in enumerate(pages)]

    def push(first: int, definitions: list) -> tuple[float, float, Counter, Counter]:
        """Redis CPU per view of one set's round, this process's CPU per view recording it, and the
        calls and microseconds of each command."""
        funnels.read_definitions = lambda: definitions
        funnels.forget()
        batch = views(first)
        before, stats = cpu_seconds(client), client.info("commandstats")
        recording = time.process_time()
        for start in range(0, users, BATCH):
            ingest.record_events(batch[start : start + BATCH], day_writes=ingest.PROCESS_DAY_WRITES)
        own = (time.process_time() - recording) * 1e6 / users
        after = client.info("commandstats")
        cpu = (cpu_seconds(client) - before) * 1e6 / users
        calls, usec = Counter(), Counter()
        for name, value in after.items():
            if name != "cmdstat_info":
                calls[name.removeprefix("cmdstat_")] = value["calls"] - stats.get(name, {}).get("calls", 0)
                usec[name.removeprefix("cmdstat_")] = value["usec"] - stats.get(name, {}).get("usec", 0)
        return cpu, own, calls, usec

    variants = {
        "no funnel": (0, []),
        f"{FUNNELS} funnels, steps among the {STEP_PAGES} most viewed pages": (users, popular),
        f"{FUNNELS} funnels, steps among all {PAGES} pages": (2 * users, anywhere),
    }
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    python: dict[str, list[float]] = {name: [] for name in variants}
    calls: dict[str, Counter] = {name: Counter() for name in variants}
    usec: dict[str, Counter] = {name: Counter() for name in variants}
    for r in range(rounds + 1):  # round 0 warms up: sessions started, the users' day written
        moment[0] += ROUND_S
        for name, (first, definitions) in variants.items():
            spent, own, counted, timed = push(first, definitions)
            if r:
                cpu[name].append(spent)
                python[name].append(own)
                calls[name] += counted
                usec[name] += timed
    medians = {name: statistics.median(samples) for name, samples in cpu.items()}
    python_medians = {name: statistics.median(samples) for name, samples in python.items()}
    sample = views(0)
    matching = {}
    for name, (_, definitions) in variants.items():
        matcher = funnels.Matcher(tuple(funnels.Definition.of(funnel) for funnel in definitions))
        matching[name] = sum(1 for event in sample if matcher.view(event.ts, event.path).matches) / len(sample)
    per_view = {name: {cmd: n / (users * rounds) for cmd, n in found.items()} for name, found in calls.items()}

    heavy = next(name for name in variants if "most viewed" in name)
    extra_us = {cmd: (n - usec["no funnel"][cmd]) / (users * rounds) for cmd, n in usec[heavy].items()}
    scripts_us = extra_us.pop("evalsha", 0.0)
    commands_us = sum(extra_us.values())  # what the funnel script's commands add; the rest is its Lua

    memory = memory_by_family(client)
    state = memory.get(STATE_FAMILY, (0, 0))
    live = lifetimes.FUNNEL_STATES.live(calendar.day_of(moment[0]))
    state_people = sum(client.hlen(keys.funnel_states(p, g)) for p in range(funnel_store.PARTITIONS) for g in live)
    counts = memory.get("{fn:<partition>}:counts:<month>", (0, 0))
    results = {
        "users_per_set": users,
        "rounds": rounds,
        "funnels": {
            name: [{"steps": f.steps, "mode": f.mode, "window": f.window} for f in definitions]
            for name, (_, definitions) in variants.items()
        },
        "redis_cpu_us_per_page_view": medians,
        "recording_process_cpu_us_per_page_view": python_medians,
        "samples": cpu,
        "ratio_to_no_funnel": {name: us / medians["no funnel"] for name, us in medians.items()},
        "share_of_views_matching_a_step": matching,
        "commands_per_page_view": per_view,
        "state_hashes": state[0],
        "state_people": state_people,
        "state_bytes_per_person": state[1] / state_people if state_people else 0,
        "counts_keys": counts[0],
        "counts_bytes": counts[1],
        "added_us_per_view": {
            "scripts": scripts_us,
            "commands_in_them": commands_us,
            "lua": scripts_us - commands_us,
        },
    }
    table = [
        [
            "page views of returning users",
            "views matching a step",
            "Redis CPU us per view",
            "ratio",
            "commands per view",
            "recording process CPU us per view",
        ]
    ]
    for name, us in medians.items():
        commands = sum(per_view[name].values())
        ratio = f"{us / medians['no funnel']:.2f}x"
        table.append(
            [name, f"{matching[name]:.0%}", f"{us:.1f}", ratio, f"{commands:.2f}", f"{python_medians[name]:.1f}"]
        )
    extra = {cmd: n - per_view["no funnel"].get(cmd, 0) for cmd, n in per_view[heavy].items()}
    notes = (
        f"{users:,} users a set, one page view each a round, {rounds} rounds interleaved (medians); pages by "
        f"popularity (Zipf) over {PAGES}; {FUNNELS} funnels of 3-5 steps each, half strict, windows of {WINDOW} s. "
        "What the funnels on the most viewed pages add per page view: "
        + ", ".join(f"{cmd} {n:.2f}" for cmd, n in sorted(extra.items(), key=lambda item: -item[1]) if n >= 0.005)
        + f". State: {state_people:,} people in {state[0]} hashes, {results['state_bytes_per_person']:.0f} bytes "
        f"each (their progress in every funnel); counts: {counts[0]:,} hashes, {counts[1]:,} bytes in all. "
        f"Where the added Redis time goes (commandstats): {scripts_us:.1f} us a view more in scripts, of which "
        f"{commands_us:.1f} us in the commands they run and {scripts_us - commands_us:.1f} us in their Lua. "
        "The recording process (this one, as the middleware's batches and the ingest API) matches the paths "
        "and advances the states itself: its CPU per view is the last column. "
        f"Command: `python -m bench.funnels --users {users} --rounds {rounds}`."
    )
    harness.write("funnels", results, table, notes)


if __name__ == "__main__":
    main()
