"""Last-seen write paths, side by side on one private Redis (``python -m bench.last_seen``).

1. the last-seen path the service runs (the store's pipelined EVALSHA, one per 1,000 events),
2. the whole ``ingest.record_events``: that EVALSHA plus the visitor, active-user and
   group-index updates every event also gets, in the same single round trip,
3. raw batched ``ZADD ... GT`` from redis-py (the client-side limit: no change tracking),
4. one round trip per event through the same script,
5. contention: 16 writer processes on 100 hot users: the per-event script vs a WATCH/MULTI retry
   loop doing the same write (score and change mark), and the whole service, per event and batched.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import time

from bench import harness


def _recent(rng: random.Random) -> float:
    """A time in the last hour, in random order: live traffic (one day's visitor and active keys),
    with the late and out-of-order arrivals the script must not let move a last seen back."""
    return round(time.time() - rng.uniform(0, 3600), 3)


def _events(count: int, users: int, seed: int) -> list[tuple[str, float]]:
    rng = random.Random(seed)
    return [(f"u{rng.randrange(users)}", _recent(rng)) for _ in range(count)]


def _latest(pairs) -> dict[str, float]:
    latest: dict[str, float] = {}
    for user, ts in pairs:
        latest[user] = max(ts, latest.get(user, 0.0))
    return latest


def _last_seen_write(client, latest: dict[str, float]) -> None:
    """Exactly the service's last-seen step: the store queues the script in a pipeline, one send."""
    from activity.store import last_seen as last_seen_store

    pipe = client.pipeline(transaction=False)
    last_seen_store.queue_update(pipe, latest, time.time())
    pipe.execute()


def _reset(client) -> None:
    from activity.store import last_seen as last_seen_store

    for part in last_seen_store.partitions():
        client.delete(part.seen, part.dirty, part.claimed)


def single_client(count: int, users: int, batch: int, rounds: int) -> dict[str, float]:
    from activity.events import Event
    from activity.services import ingest
    from activity.store import keys
    from activity.store.client import get_client

    client = get_client()
    events = _events(count, users, seed=1)
    batches = [events[i : i + batch] for i in range(0, count, batch)]
    as_events = [[Event(u, ts) for u, ts in chunk] for chunk in batches]

    def last_seen_batched() -> None:
        for chunk in batches:
            _last_seen_write(client, _latest(chunk))

    def service() -> None:
        for chunk in as_events:
            ingest.record_events(chunk, day_writes=ingest.PROCESS_DAY_WRITES)

    def zadd_gt() -> None:
        for chunk in batches:
            client.zadd(keys.last_seen(0), _latest(chunk), gt=True)

    per_event_count = count // 10
    single = events[:per_event_count]

    def per_event() -> None:
        for user, ts in single:
            _last_seen_write(client, {user: ts})

    variants = (
        ("last_seen_batched", last_seen_batched, count),
        ("service_batched", service, count),
        ("zadd_gt_batched", zadd_gt, count),
        ("per_event", per_event, per_event_count),
    )
    return harness.interleaved({name: (fn, n) for name, fn, n in variants}, rounds, before_each=lambda: _reset(client))


def _contended_writer(mode: str, seed: int, updates: int, hot: int, batch: int, go, out) -> None:
    import redis

    from activity.events import Event
    from activity.services import ingest
    from activity.store import keys
    from activity.store.client import get_client

    client = get_client()
    plain = redis.Redis(connection_pool=client.connection_pool)  # WATCH needs redis-py's own pipeline
    key = keys.last_seen(0)
    rng = random.Random(seed)
    latencies: list[float] = []
    retries = 0
    pending: list[Event] = []
    client.ping()  # connect before the clock starts
    go.wait()
    for _ in range(updates):
        user, ts = f"hot{rng.randrange(hot)}", _recent(rng)
        started = time.perf_counter()
        if mode == "script":
            _last_seen_write(client, {user: ts})
        elif mode == "service":
            ingest.record_events([Event(user, ts)], day_writes=ingest.PROCESS_DAY_WRITES)
        elif mode == "batched":
            pending.append(Event(user, ts))
            if len(pending) < batch:
                continue
            ingest.record_events(pending, day_writes=ingest.PROCESS_DAY_WRITES)
            pending = []
        else:
            with plain.pipeline() as pipe:
                while True:
                    try:
                        pipe.watch(key)
                        current = pipe.zscore(key, user)
                        if current is None or ts > current:
                            pipe.multi()
                            pipe.zadd(key, {user: ts})
                            pipe.zadd(keys.last_seen_dirty(0), {user: ts}, nx=True)
                            pipe.execute()
                        else:
                            pipe.unwatch()
                        break
                    except redis.WatchError:
                        retries += 1
        latencies.append(time.perf_counter() - started)
    if pending:
        ingest.record_events(pending, day_writes=ingest.PROCESS_DAY_WRITES)
    out.put((latencies, retries))


def contention(writers: int, updates: int, hot: int, batch: int, rounds: int) -> dict[str, dict[str, float]]:
    """Each mode runs ``rounds`` times, interleaved with the others; the median round is kept."""
    samples: dict[str, list[dict[str, float]]] = {}
    for _ in range(rounds):
        for mode in ("watch_multi", "script", "service", "batched"):
            samples.setdefault(mode, []).append(_contended_round(mode, writers, updates, hot, batch))
    return {mode: sorted(runs, key=lambda run: run["updates_per_s"])[len(runs) // 2] for mode, runs in samples.items()}


def _contended_round(mode: str, writers: int, updates: int, hot: int, batch: int) -> dict[str, float]:
    from activity.store.client import get_client

    ctx = multiprocessing.get_context("fork")
    _reset(get_client())
    queue, go = ctx.Queue(), ctx.Event()
    processes = [
        ctx.Process(target=_contended_writer, args=(mode, seed, updates, hot, batch, go, queue))
        for seed in range(writers)
    ]
    for process in processes:
        process.start()
    time.sleep(0.5)  # let every writer fork and connect
    started = time.perf_counter()
    go.set()
    gathered = [queue.get() for _ in processes]
    elapsed = time.perf_counter() - started
    for process in processes:
        process.join()
    latencies = [x for lat, _ in gathered for x in lat]
    return {
        "updates_per_s": writers * updates / elapsed,
        "p50_ms": harness.percentile(latencies, 50) * 1000,
        "p99_ms": harness.percentile(latencies, 99) * 1000,
        "retries": sum(r for _, r in gathered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000, help="events per round")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--updates", type=int, default=1000, help="updates per contended writer per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; medians are reported")
    args = parser.parse_args()
    server = harness.start()
    try:
        rates = single_client(args.events, args.users, args.batch, args.rounds)
        contended = contention(args.writers, args.updates, hot=100, batch=100, rounds=args.rounds)
    finally:
        server.stop()
    ratio_gt = rates["last_seen_batched"] / rates["zadd_gt_batched"]
    ratio_service_gt = rates["service_batched"] / rates["zadd_gt_batched"]
    ratio_watch = contended["script"]["updates_per_s"] / contended["watch_multi"]["updates_per_s"]
    ratio_watch_batched = contended["batched"]["updates_per_s"] / contended["watch_multi"]["updates_per_s"]
    table = [
        ["path", "updates/s", "ratio", "p50 ms", "p99 ms", "WATCH retries"],
        [
            "service's last-seen path, batched script (1 EVALSHA / 1,000 events)",
            f"{rates['last_seen_batched']:,.0f}",
            f"{ratio_gt:.2f}x of ZADD GT",
            "",
            "",
            "",
        ],
        [
            "whole service: last seen + visitors + actives + group index (1 round trip / 1,000 events)",
            f"{rates['service_batched']:,.0f}",
            f"{ratio_service_gt:.2f}x of ZADD GT",
            "",
            "",
            "",
        ],
        ["raw batched ZADD GT (no change tracking)", f"{rates['zadd_gt_batched']:,.0f}", "1.00x", "", "", ""],
        [
            "script, one round trip per event",
            f"{rates['per_event']:,.0f}",
            f"{rates['per_event'] / rates['zadd_gt_batched']:.2f}x of ZADD GT",
            "",
            "",
            "",
        ],
    ]
    for mode, label in (
        ("watch_multi", "WATCH/MULTI retry loop"),
        ("script", "script, one round trip per event"),
        ("service", "whole service, one call per event"),
        ("batched", "whole service, batched (100 / call)"),
    ):
        row = contended[mode]
        ratio = row["updates_per_s"] / contended["watch_multi"]["updates_per_s"]
        table.append(
            [
                f"{args.writers} writers on 100 hot users: {label}",
                f"{row['updates_per_s']:,.0f}",
                f"{ratio:.2f}x of WATCH",
                f"{row['p50_ms']:.2f}",
                f"{row['p99_ms']:.2f}",
                str(row["retries"]),
            ]
        )
    notes = (
        f"Medians of {args.rounds} interleaved rounds. Sizes: {args.events:,} events a round over "
        f"{args.users:,} users in batches of {args.batch:,}; contention: {args.writers} processes x "
        f"{args.updates:,} updates a round on 100 hot users. Command: `python -m bench.last_seen`."
    )
    harness.write(
        "last_seen",
        {
            "args": vars(args),
            "single_client": rates,
            "contention": contended,
            "ratios": {
                "last_seen_vs_zadd_gt": ratio_gt,
                "service_vs_zadd_gt": ratio_service_gt,
                "script_vs_watch": ratio_watch,
                "batched_vs_watch": ratio_watch_batched,
            },
        },
        table,
        notes,
    )


if __name__ == "__main__":
    main()
