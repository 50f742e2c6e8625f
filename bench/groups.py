"""Group-view live updates, side by side on one private Redis (``python -m bench.groups``).

Users belong to 5 groups each; 1,000 groups, half of them materialized (views with a TTL). Each
user update is fanned out to the user's 5 group views, which must be written only if they exist:

1. ``service``    the service's upsert: ZADD XX GT CH per view (XX makes no missing view), atomic
                  per view, all of a batch in one round trip;
2. ``ttl_guard``  the TTL guard the design card also proposes (the service did not keep it):
                  PTTL of 250 views in one round trip, then ZADD XX GT of those with TTL > margin
                  in a second (a view expiring in between is recreated partially unless the margin
                  covers the gap);
3. ``naive``      EXISTS then ZADD GT, two round trips per view (not atomic: a view expiring in
                  between is recreated partially);
4. ``watch``      WATCH view, EXISTS, MULTI ZADD GT EXEC per view, retried on conflict.

Measured for one user per call (what the tracking middleware sends) and 100 users per call (an
ingest batch), and with 4 writer processes on the same groups. The user -> groups lookup is the
same for every variant and left out. "updates/s" counts user updates (each touching 5 views).
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import random
import time

import redis

from bench import harness

GROUPS = 1000
PER_USER = 5
VIEW_TTL = 3600
MARGIN = 1.0


def setup(client: redis.Redis, users: int) -> dict[str, list[int]]:
    """Random memberships (5 distinct groups per user); views for the even-numbered groups."""
    from activity.store import keys
    from activity.store.groups import NEVER

    rng = random.Random(7)
    groups_of = {f"u{i}": rng.sample(range(GROUPS), PER_USER) for i in range(users)}
    members: dict[int, list[str]] = {g: [] for g in range(GROUPS)}
    for user, gids in groups_of.items():
        for g in gids:
            members[g].append(user)
    pipe = client.pipeline(transaction=False)
    for g in range(0, GROUPS, 2):
        pipe.zadd(keys.group_view(g), dict.fromkeys(members[g], NEVER))
        pipe.expire(keys.group_view(g), VIEW_TTL)
    pipe.execute()
    return groups_of


def _fan_out(batch: list[str], groups_of: dict[str, list[int]], ts: float) -> dict[int, dict[str, float]]:
    updates: dict[int, dict[str, float]] = {}
    for user in batch:
        for g in groups_of[user]:
            updates.setdefault(g, {})[user] = ts
    return updates


def ttl_guard(client: redis.Redis, updates: dict[int, dict[str, float]]) -> int:
    """Per 250 views: PTTL in one round trip, then ZADD XX GT where the TTL is above the margin in
    another. A view without a TTL (PTTL -1) is skipped too: the sweep removes such keys."""
    from activity.store import keys

    moved = 0
    items = [(g, s) for g, s in updates.items() if s]
    for start in range(0, len(items), 250):
        batch = items[start : start + 250]
        pipe = client.pipeline(transaction=False)
        for g, _ in batch:
            pipe.pttl(keys.group_view(g))
        ttls = pipe.execute()
        pipe = client.pipeline(transaction=False)
        for (g, scores), ttl in zip(batch, ttls, strict=True):
            if ttl > MARGIN * 1000:
                pipe.zadd(keys.group_view(g), dict(scores), xx=True, gt=True, ch=True)
        if len(pipe):
            moved += sum(pipe.execute())
    return moved


def naive(client: redis.Redis, updates: dict[int, dict[str, float]]) -> int:
    from activity.store import keys

    for g, scores in updates.items():
        if client.exists(keys.group_view(g)) == 1:
            client.zadd(keys.group_view(g), scores, gt=True)
    return 0


def watch(client: redis.Redis, updates: dict[int, dict[str, float]]) -> int:
    """Returns the number of WATCH conflicts retried."""
    from activity.store import keys

    plain = redis.Redis(connection_pool=client.connection_pool)  # WATCH needs redis-py's own pipeline
    retries = 0
    for g, scores in updates.items():
        key = keys.group_view(g)
        with plain.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)
                    if pipe.exists(key) != 1:
                        pipe.unwatch()
                        break
                    pipe.multi()
                    pipe.zadd(key, scores, gt=True)
                    pipe.execute()
                    break
                except redis.WatchError:
                    retries += 1
    return retries


def strategies(client: redis.Redis) -> dict[str, object]:
    from activity.store import groups as store

    return {
        "service": store.upsert,
        "ttl_guard": ttl_guard,
        "naive": naive,
        "watch": watch,
    }


def single_client(groups_of: dict[str, list[int]], batch: int, count: int, rounds: int) -> dict[str, float]:
    from activity.store.client import get_client

    client = get_client()
    users = list(groups_of)
    rng = random.Random(batch)
    batches = [rng.sample(users, batch) for _ in range(count // batch)]
    clock = itertools.count(1_700_000_000)

    def run(fn) -> None:
        for chunk in batches:
            fn(client, _fan_out(chunk, groups_of, float(next(clock))))

    return harness.interleaved(
        {name: (lambda fn=fn: run(fn), len(batches) * batch) for name, fn in strategies(client).items()}, rounds
    )


def _writer(name: str, groups_of: dict[str, list[int]], hot: list[str], count: int, seed: int, out, ready) -> None:
    from activity.store.client import get_client

    client = get_client()
    fn = strategies(client)[name]
    rng = random.Random(seed)
    retries = 0
    client.ping()  # connect before the clock starts
    ready.wait()
    for i in range(count):
        result = fn(client, _fan_out([rng.choice(hot)], groups_of, 1_800_000_000.0 + seed + i * 0.001))
        if name == "watch":
            retries += result
    out.put(retries)


def contention(groups_of: dict[str, list[int]], writers: int, count: int, rounds: int) -> dict[str, dict]:
    """Writers in separate processes, one user per call, all on the members of 10 hot groups."""
    hot_groups = set(range(0, 20, 2))
    hot = [u for u, gids in groups_of.items() if hot_groups & set(gids)]
    context = multiprocessing.get_context("fork")
    names = ("service", "ttl_guard", "naive", "watch")
    results: dict[str, dict] = {name: {"rates": [], "retries": 0} for name in names}
    for r in range(rounds):
        for name in results:
            out, ready = context.Queue(), context.Barrier(writers + 1)
            procs = [
                context.Process(target=_writer, args=(name, groups_of, hot, count, r * 100 + w, out, ready))
                for w in range(writers)
            ]
            for proc in procs:
                proc.start()
            ready.wait()  # process start-up is not timed
            started = time.perf_counter()
            retries = sum(out.get() for _ in procs)
            for proc in procs:
                proc.join()
            results[name]["rates"].append(writers * count / (time.perf_counter() - started))
            results[name]["retries"] += retries
    return {
        name: {"updates_per_s": sorted(row["rates"])[len(row["rates"]) // 2], "watch_retries": row["retries"]}
        for name, row in results.items()
    }


def check(client: redis.Redis, groups_of: dict[str, list[int]]) -> bool:
    """Every materialized view still holds its whole group; no other group got a view."""
    from activity.store import keys

    sizes = {g: 0 for g in range(GROUPS)}
    for gids in groups_of.values():
        for g in gids:
            sizes[g] += 1
    pipe = client.pipeline(transaction=False)
    for g in range(GROUPS):
        pipe.zcard(keys.group_view(g))
    return all(n == (sizes[g] if g % 2 == 0 else 0) for g, n in enumerate(pipe.execute()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=20_000, help="users, 5 groups each (1,000 groups)")
    parser.add_argument("--single", type=int, default=300, help="user updates a round, one user per call")
    parser.add_argument("--batched", type=int, default=3000, help="user updates a round, 100 users per call")
    parser.add_argument("--writers", type=int, default=4, help="writer processes in the contended run")
    parser.add_argument("--contended", type=int, default=200, help="updates per writer per contended round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are reported")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (sizes / 5, 2 rounds)")
    args = parser.parse_args()
    if args.quick:
        args.users, args.single, args.batched, args.contended, args.rounds = 4000, 60, 600, 40, 2
    server = harness.start("benchgroups:")
    try:
        from activity.store.client import get_client

        client = get_client()
        groups_of = setup(client, args.users)
        one = single_client(groups_of, 1, args.single, args.rounds)
        hundred = single_client(groups_of, 100, args.batched, args.rounds)
        contended = contention(groups_of, args.writers, args.contended, args.rounds)
        intact = check(client, groups_of)
        commands = {k.removeprefix("cmdstat_"): v["calls"] for k, v in client.info("commandstats").items()}
    finally:
        server.stop()
    labels = {
        "service": "ZADD XX GT per view, pipelined (the service's)",
        "ttl_guard": "TTL guard pipeline (PTTL, then ZADD XX GT)",
        "naive": "naive EXISTS then ZADD, 2 round trips per view",
        "watch": "WATCH / MULTI per view",
    }
    table = [["strategy", "1 user/call", "100 users/call", f"{args.writers} writers, hot groups", "vs WATCH (1/call)"]]
    for name, label in labels.items():
        table.append(
            [
                label,
                f"{one[name]:,.0f}",
                f"{hundred[name]:,.0f}",
                f"{contended[name]['updates_per_s']:,.0f}",
                f"{one[name] / one['watch']:.1f}x",
            ]
        )
    notes = (
        f"User updates per second (each fans out to 5 group views, half of them materialized); medians of "
        f"{args.rounds} interleaved rounds. Sizes: 1,000 groups, {args.users:,} users, {args.single} single "
        f"updates and {args.batched:,} batched updates a round; contention: {args.writers} processes x "
        f"{args.contended} updates on the members of 10 hot groups ({contended['watch']['watch_retries']} "
        f"WATCH retries). Views intact afterwards (full membership, no view created): {intact}. "
        "Command: `python -m bench.groups`."
    )
    harness.write(
        "groups",
        {
            "args": vars(args),
            "one_user_per_call": one,
            "hundred_users_per_call": hundred,
            "contention": contended,
            "views_intact": intact,
            "server_commands": {k: commands.get(k, 0) for k in ("pttl", "exists", "zadd", "watch", "exec")},
        },
        table,
        notes,
    )


if __name__ == "__main__":
    main()
