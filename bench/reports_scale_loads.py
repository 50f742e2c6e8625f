"""The reports bench's measured loads (``bench.reports_scale``): the incremental reports, the
fixed-work control and the old full sorts, each in worker processes taking turns under a PING
probe, with what SLOWLOG and INFO commandstats say of each. Apart from the seed and the table."""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import math
import multiprocessing
import os
import queue
import random
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import redis

from bench.reports_scale_seed import old_viewers, union_inputs

PAGE_SIZE = 50
SLOWLOG_FLOOR_US = 1000  # SLOWLOG keeps commands slower than this; below it the slowest is "under 1 ms"
SLOWLOG_LENGTH = 100_000
BENCH_OWN = ("config", "slowlog", "info")  # the bench's own commands, left out of the slowest and costliest
PREFERRED_NICE, LOAD_NICE = -10, 10  # Redis and the probe ahead of the load processes and the neighbours
WINDOW_S = 1.0  # loads measured together take turns this long
FIXED_WORK_US = 500
# The control's command: a Lua loop whose work never varies (calibrated to about FIXED_WORK_US), so
# any time SLOWLOG gives it beyond that is the machine's doing, not the command's.
FIXED_WORK = "local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return 1"
FORK = multiprocessing.get_context("fork")  # workers inherit the set-up Django and the pinned clock


def prefer(pid: int = 0) -> int:
    """Raise a process (0: this one) to nice -10 when allowed, so that on a shared machine Redis and
    the probe are measured rather than the neighbours' time slices; returns the niceness it has."""
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, pid, PREFERRED_NICE)
    return os.getpriority(os.PRIO_PROCESS, pid)


def connect(url: str, **options: Any) -> redis.Redis:
    """A client without redis-py's default 5 s socket timeout: SORT over every viewer takes longer."""
    return redis.Redis.from_url(url, socket_timeout=None, **options)


def probe(url: str, seconds: float, turn: Any, go: Any, out: Any) -> None:
    """PING every millisecond on a connection of its own for ``seconds``; send back the latencies
    (s) by whose turn it was when each PING was sent, and the time it all took (a PING sent at the
    end may wait past it)."""
    prefer()
    client = connect(url)
    client.ping()
    latencies: dict[int, list[float]] = defaultdict(list)
    go.wait()
    end = time.perf_counter() + seconds
    tick = time.perf_counter()
    while tick < end:
        sent, mine = time.perf_counter(), turn.value
        client.ping()
        latencies[mine].append(time.perf_counter() - sent)
        tick = max(tick + 0.001, time.perf_counter())
        time.sleep(max(0.0, tick - time.perf_counter()))
    out.put((dict(latencies), time.perf_counter() - end + seconds))


def _turns(turn: Any, mine: int, go: Any, stop: Any) -> Iterator[None]:
    """Yield whenever it is load ``mine``'s turn, until told to stop. Load processes run at a lower
    priority, so on a 2-core machine they yield the CPU to Redis and the probe."""
    os.nice(LOAD_NICE)
    go.wait()
    while not stop.is_set():
        if turn.value == mine:
            yield
        else:
            time.sleep(0.0005)


def incremental_worker(viewers: int, turn: Any, mine: int, go: Any, stop: Any, out: Any) -> None:
    """The service as it is now, one operation per turn check: rebuild ``most-active`` for the day
    and the week, read the first, a random and the last page of ``active-by-name``, and
    ``audience.stats()``."""
    from activity.services import audience, reports

    rng = random.Random(os.getpid())
    last = max(1, math.ceil(viewers / PAGE_SIZE))
    done: Counter[str] = Counter()

    def rebuild(period: str) -> None:
        done[f"most-active {period} {reports.rebuild('most-active', period)}"] += 1

    def by_name(period: str, number: int | None) -> None:
        """Page ``number`` of the by-name report (None: a random one)."""
        reports.page("active-by-name", period, number or rng.randint(1, last), PAGE_SIZE)
        done["active-by-name pages"] += 1

    def stats() -> None:
        audience.stats()
        done["stats() calls"] += 1

    operations: list[Callable[[], None]] = [stats]
    for period in ("day", "week"):
        operations.append(functools.partial(rebuild, period))
        operations += [functools.partial(by_name, period, number) for number in (1, None, last)]
    for operation, _ in zip(itertools.cycle(operations), _turns(turn, mine, go, stop)):
        operation()
    out.put((mine, dict(done)))


def control_worker(iterations: int, turn: Any, mine: int, go: Any, stop: Any, out: Any) -> None:
    """The control: a command whose work never varies (a Lua loop of ``iterations``, about
    FIXED_WORK_US), once a millisecond, so whatever SLOWLOG gives it beyond that, and whatever the
    probe waits beyond the queue it makes, is the machine's."""
    from django.conf import settings as django_settings

    client = connect(django_settings.REDIS_URL)
    calls = 0
    for _ in _turns(turn, mine, go, stop):
        client.eval(FIXED_WORK, 0, iterations)
        calls += 1
        time.sleep(0.001)
    out.put((mine, {f"fixed-work calls (~{FIXED_WORK_US} us each)": calls}))


def full_sort_worker(turn: Any, mine: int, go: Any, stop: Any, out: Any) -> None:
    """The shapes before the incremental reports, as raw commands over every viewer of the week: the two reports'
    SORT ... STORE, and the month's active users and unique visitors as unions of 30 days."""
    from django.conf import settings as django_settings

    from activity import calendar, clock
    from activity.services import reports
    from activity.store import keys

    client = connect(django_settings.REDIS_URL)
    week = calendar.period_name("week", calendar.day_of(clock.now()))
    viewers_key, names, views = old_viewers(week), keys.viewer_pattern(keys.VIEWER_NAME), keys.viewer_pattern(week)
    ranked, by_name = keys.report_rows(f"old-most-active:{week}"), keys.report_rows(f"old-by-name:{week}")
    bitmaps, hlls = union_inputs(clock.now())
    bits_union, hll_union = f"{bitmaps[0]}:old-union", f"{hlls[0]}:old-union"
    top = reports.TOP
    done: Counter[str] = Counter()

    def most_active() -> None:
        client.sort(viewers_key, by=views, get=["#", names, views], desc=True, start=0, num=top, store=ranked)
        done["SORT BY uv:* DESC LIMIT"] += 1

    def alphabetical() -> None:
        client.sort(viewers_key, by=names, get=["#", names], alpha=True, store=by_name)
        done["SORT BY name:* ALPHA"] += 1

    def unions() -> None:
        client.bitop("OR", bits_union, *bitmaps)
        client.bitcount(bits_union)
        client.pfmerge(hll_union, *hlls)
        client.pfcount(hll_union)
        done["BITOP OR + PFMERGE of 30 days"] += 1

    for operation, _ in zip(itertools.cycle([most_active, alphabetical, unions]), _turns(turn, mine, go, stop)):
        operation()
    out.put((mine, dict(done)))


def phase(url: str, args: argparse.Namespace, loads: dict[str, Callable[..., None]]) -> dict[str, dict[str, Any]]:
    """Run each load in ``args.workers`` processes under the probe, the loads taking turns in
    windows of WINDOW_S (so they meet the same background noise), ``args.seconds`` each. Per load:
    the probe's latencies in its windows, its slowest commands (SLOWLOG) and its costliest command
    on average (INFO commandstats); the control owns EVAL, the other load every other command."""
    raw = connect(url)
    turn = FORK.Value("i", 0, lock=False)  # the load whose window it is
    go, stop = FORK.Event(), FORK.Event()
    probe_out, worker_out = FORK.Queue(), FORK.Queue()
    processes = [FORK.Process(target=probe, args=(url, args.seconds * len(loads), turn, go, probe_out))]
    for mine, load in enumerate(loads.values()):
        processes += [FORK.Process(target=load, args=(turn, mine, go, stop, worker_out)) for _ in range(args.workers)]
    for process in processes:
        process.start()
    time.sleep(1)  # every process connected and waiting
    raw.slowlog_reset()
    raw.config_resetstat()
    go.set()
    while True:
        try:
            latencies, elapsed = probe_out.get(timeout=WINDOW_S)
            break
        except queue.Empty:
            turn.value = (turn.value + 1) % len(loads)
    stop.set()
    done: dict[int, Counter[str]] = defaultdict(Counter)
    for _ in range(len(loads) * args.workers):
        mine, counts = worker_out.get()
        done[mine].update(counts)
    for process in processes:
        process.join()
    slow = [(entry["duration"], _command_name(entry["command"])) for entry in raw.slowlog_get(SLOWLOG_LENGTH)]
    slow = sorted((entry for entry in slow if not entry[1].lower().startswith(BENCH_OWN)), reverse=True)
    commands = {name.removeprefix("cmdstat_"): stats for name, stats in raw.info("commandstats").items()}
    costliest = sorted(
        ((stats["usec_per_call"], name) for name, stats in commands.items() if not name.startswith(BENCH_OWN)),
        reverse=True,
    )
    results = {}
    for mine, name in enumerate(loads):
        own = latencies.get(mine, [0.0])
        quantiles = statistics.quantiles(own, n=1000, method="inclusive") if len(own) > 1 else own * 999
        own_slow = [entry for entry in slow if _owned_by(name, entry[1])]
        results[name] = {
            "probe_pings": len(own),
            "probe_p50_ms": round(quantiles[499] * 1000, 3),
            "probe_p99_ms": round(quantiles[989] * 1000, 3),
            "probe_p99_9_ms": round(quantiles[998] * 1000, 3),
            "probe_max_ms": round(max(own) * 1000, 3),
            # How much of the load's windows the probe spent waiting on PINGs slower than 5 ms: a
            # stalled probe sends no PING, so the percentiles alone understate a stall.
            "stalled_share": round(sum(x for x in own if x > 0.005) / (elapsed / len(loads)), 4),
            "slowlog_entries": len(own_slow),
            "slowlog_over_5ms": sum(duration > 5000 for duration, _ in own_slow),
            "slowest": own_slow[:5],
            "costliest_mean_us": [entry for entry in costliest if _owned_by(name, entry[1])][:3],
            "operations": dict(done[mine]),
        }
        print(name, results[name])
    return results


def _owned_by(load: str, command: str) -> bool:
    """Whether a command (a SLOWLOG name or a commandstats one) is the load's: the control owns EVAL,
    its fixed work; any other load every other command."""
    return (command.split()[0].lower() == "eval") == (load == "control")


def calibrate(raw: redis.Redis) -> int:
    """Iterations of the FIXED_WORK loop that take about FIXED_WORK_US in this Redis."""
    raw.config_resetstat()
    for _ in range(20):
        raw.eval(FIXED_WORK, 0, 100_000)
    us = raw.info("commandstats")["cmdstat_eval"]["usec_per_call"]
    return int(100_000 * FIXED_WORK_US / us)


def _command_name(command: bytes) -> str:
    """A SLOWLOG entry's command and key (without the prefix), SORT's BY pattern, EVALSHA's script."""
    from activity.store import keys
    from activity.store.scripts import LUA_DIR, LuaScript

    scripts = {LuaScript(path.stem).sha: path.stem for path in LUA_DIR.glob("*.lua")}
    name, *rest = command.decode(errors="replace").split()
    rest = [word.removeprefix(keys.prefix()) for word in rest]
    if name.upper() == "EVAL":
        return "EVAL (fixed work)"
    if name.upper() == "EVALSHA" and rest:
        return f"EVALSHA {scripts.get(rest[0], rest[0][:8])}"
    if name.upper() == "SORT" and len(rest) > 2 and rest[1].upper() == "BY":
        return f"SORT {rest[0]} BY {rest[2]}"
    return f"{name} {rest[0]}" if rest else name
