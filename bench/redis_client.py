"""Client CPU of one Redis round trip: redis-py's own pool and pipeline against the service's
(``python -m bench.redis_client``).

Every API request and every batch of tracked pages costs one pipelined round trip, so what the client
library spends around the socket is paid per request. The round trip here is an API request's: a
script (the throttle's count) and a ZSCORE (a last seen), on a private redis-server:

1. ``redis.Redis``: redis-py's ``ConnectionPool`` and ``Pipeline.execute``, as redis-py ships them;
2. the same pipeline on the service's ``ServicePool`` (the pool without its per-checkout metrics);
3. the service's ``StandaloneClient.pipeline()``: ``ServicePool`` and its own write-and-read,
   the riders check and the round-trip counter included.

Each is timed in interleaved rounds (``time.process_time``: client CPU; Redis's own is not counted)
and, where valgrind is installed, counted in instructions by callgrind, which does not drift with
the machine's load (within a percent or two from run to run). Writes ``bench/results/redis_client.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import redis

from bench import harness

SCRIPT = "return redis.call('INCR', KEYS[1])"
VARIANTS = {
    "redis_py": "redis-py: its ConnectionPool and Pipeline.execute",
    "service_pool": "redis-py's Pipeline.execute on the service's ServicePool",
    "service": "the service's pipeline (ServicePool and its own write and read)",
}


def round_trip(variant: str, url: str) -> Callable[[], list]:
    """One round trip of ``variant``: a pipeline of the script and a ZSCORE, sent and read."""
    from activity.store.client import ServicePool, StandaloneClient

    if variant == "redis_py":
        client = redis.Redis.from_url(url, decode_responses=True)
    elif variant == "service_pool":
        client = redis.Redis(connection_pool=ServicePool.from_url(url, decode_responses=True))
    else:
        client = StandaloneClient.from_url(url, decode_responses=True)
    sha = client.script_load(SCRIPT)

    def send() -> list:
        pipe = client.pipeline(transaction=False)
        pipe.execute_command("EVALSHA", sha, 1, "bench:count")
        pipe.execute_command("ZSCORE", "bench:seen", "u1")
        return pipe.execute()

    return send


def cpu_per_round_trip(url: str, rounds: int, count: int) -> dict[str, float]:
    """Client CPU microseconds per round trip of each variant, medians of interleaved rounds."""
    sends = {variant: round_trip(variant, url) for variant in VARIANTS}
    samples: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for send in sends.values():
        for _ in range(count):  # warm-up
            send()
    for _ in range(rounds):
        for variant, send in sends.items():
            started = time.process_time()
            for _ in range(count):
                send()
            samples[variant].append((time.process_time() - started) / count * 1e6)
    return {variant: statistics.median(values) for variant, values in samples.items()}


def instructions_per_round_trip(url: str, count: int) -> dict[str, float] | None:
    """Instructions per round trip of each variant under callgrind, one process each (None without
    valgrind)."""
    if not harness.can_count_instructions():
        return None
    args = ("--url", url, "--count", str(count), "--only")
    return {variant: harness.instructions("bench.redis_client", *args, variant) / count for variant in VARIANTS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--count", type=int, default=3000, help="round trips per variant and round")
    parser.add_argument("--only", choices=VARIANTS, help=argparse.SUPPRESS)  # callgrind's runs
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
        import django

        django.setup()
        send = round_trip(args.only, args.url)
        for _ in range(200):  # warm-up
            send()
        with harness.counted():
            for _ in range(args.count):
                send()
        return
    server = harness.start("bench:")
    try:
        cpu = cpu_per_round_trip(server.url, args.rounds, args.count)
        instructions = instructions_per_round_trip(server.url, 1000)
    finally:
        server.stop()
    table = [
        ["round trip (a script and a ZSCORE, pipelined)", "client CPU us", "vs redis-py", "instructions", "vs redis-py"]
    ]
    for variant, name in VARIANTS.items():
        counted = "" if instructions is None else f"{instructions[variant]:,.0f}"
        ratio = "" if instructions is None else f"{instructions[variant] / instructions['redis_py']:.2f}x"
        table.append([name, f"{cpu[variant]:.1f}", f"{cpu[variant] / cpu['redis_py']:.2f}x", counted, ratio])
    notes = (
        f"redis-py {redis.__version__}, one private redis-server on loopback; CPU: medians of {args.rounds} "
        f"interleaved rounds of {args.count:,} round trips (time.process_time); instructions: callgrind, "
        "1,000 round trips after 200 uncounted. Command: `python -m bench.redis_client`."
    )
    harness.write(
        "redis_client", {"cpu_us": cpu, "instructions": instructions, "redis_py": redis.__version__}, table, notes
    )


if __name__ == "__main__":
    main()
