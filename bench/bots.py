"""What telling bots from people costs the tracking middleware, side by side in one run.

``python -m bench.bots``: the middleware's own per-request CPU (``time.process_time``: this
process only, Redis's work excluded; its one round trip to a private Redis included) for a
returning anonymous visitor and a signed-in user, against ``activity.services.traffic.classify`` alone with
the user agent already in its LRU (the steady state: a site sees the same few thousand agents
again and again) and with a user agent never seen before (the library's large regular expression
runs). Interleaved rounds, medians; written to bench/results/bots.json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from bench import harness

AGENTS = {
    "desktop Chrome": "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/131.0.0.0 Safari/537.36",
    "Googlebot": "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
    "curl": "curl/8.5.0",
}


def cpu_us(fn: Callable[[], object], repeat: int) -> float:
    """Microseconds of this process's CPU per call of ``fn``."""
    started = time.process_time()
    for _ in range(repeat):
        fn()
    return (time.process_time() - started) / repeat * 1e6


def run(rounds: int, repeat: int) -> dict[str, dict[str, float]]:
    from django.contrib.auth.models import AnonymousUser, User
    from django.core.signing import Signer
    from django.http import HttpResponse
    from django.test import RequestFactory

    from activity.services import traffic
    from activity.web import middleware

    factory = RequestFactory()
    page = HttpResponse("<html></html>", content_type="text/html")
    tracker = middleware.ActivityMiddleware(lambda request: page)
    cookie = Signer(salt=middleware.VISITOR_SIGNER_SALT).sign("0" * 31 + "1")

    def request(agent: str, signed_in: bool):
        made = factory.get("/pricing", HTTP_USER_AGENT=agent)
        made.COOKIES[middleware.VISITOR_COOKIE_NAME] = cookie
        made.user = User(pk=42, username="bench") if signed_in else AnonymousUser()
        return made

    anonymous, signed_in = request(AGENTS["desktop Chrome"], False), request(AGENTS["desktop Chrome"], True)
    fresh = iter(range(10**9))

    def never_seen(base: str) -> Callable[[], object]:
        return lambda: traffic.classify(request(f"{base} r{next(fresh)}", False))

    variants: dict[str, Callable[[], object]] = {
        "middleware, anonymous visitor": lambda: tracker(anonymous),
        "middleware, signed-in user": lambda: tracker(signed_in),
        "request object alone (subtracted)": lambda: request(AGENTS["desktop Chrome"], False),
    }
    for name, agent in AGENTS.items():
        known = request(agent, False)
        variants[f"classify, {name}, cached"] = lambda known=known: traffic.classify(known)
        variants[f"classify, {name}, never seen"] = never_seen(agent)
    for fn in variants.values():  # warm: scripts loaded, connection open, agents cached
        fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            samples[name].append(cpu_us(fn, repeat))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    building = medians.pop("request object alone (subtracted)")
    for name in medians:
        if "never seen" in name:
            medians[name] = max(medians[name] - building, 0.0)  # those build a request per call
    return {"cpu_us": medians, "request_building_us": {"value": building}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=400)
    args = parser.parse_args()
    server = harness.start("bench-bots:")
    try:
        found = run(args.rounds, args.repeat)
    finally:
        server.stop()
    cpu = found["cpu_us"]
    base = cpu["middleware, anonymous visitor"]
    table = [["what", "CPU us per call", "vs the middleware (anonymous visitor)"]]
    for name, value in cpu.items():
        table.append([name, f"{value:,.1f}", f"{value / base:.3f}x"])
    worst_cached = max(value for name, value in cpu.items() if name.endswith("cached"))
    notes = (
        f"{args.rounds} interleaved rounds of {args.repeat} calls each, medians; CPU of this process only "
        "(time.process_time), the middleware's Redis round trip to a private redis-server included, Redis's "
        "own work not. 'never seen' is a user agent missing from the per-process LRU "
        f"(activity.services.traffic.AGENT_CACHE_SIZE); the cost of building its request is subtracted. The costliest "
        f"cached classification is {worst_cached / base:.1%} of the middleware's CPU per anonymous request. "
        "Command: `python -m bench.bots`."
    )
    harness.write("bots", {"rounds": args.rounds, "repeat": args.repeat, **found}, table, notes)


if __name__ == "__main__":
    main()
