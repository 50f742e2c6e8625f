"""Redis's own work per event of each ingest shape, in instructions counted by callgrind: the write
path's Redis cost as a figure that does not drift with what else the shared machine runs (within a
percent from run to run), where ``bench.capacity``'s CPU times per event swing by 10-20%. So a change
of a few percent to a script shows, and ``--against DIR`` counts another checkout's code in the same
run, side by side.

Each checkout runs in a process of its own (its ``activity`` and ``project`` on the path, this file's
code driving them, nothing else of the bench imported), against a private redis-server run under
``valgrind --tool=callgrind`` with its instrumentation off until a shape's batches start: users each
with a page view and a visit today, then per shape (``bench.capacity``'s: a returning user's last
seen, a returning user's page view, a user's first page view in this process today, a new anonymous
visitor; then a returning user's page view again, once other users hold the top viewers' places,
and once more with 20 funnels whose steps nearly every page matches) one warm-up pass and one
counted pass through ``ingest.record_events`` in batches of 1,000. Counted: everything
redis-server ran meanwhile (parsing, scripts, commands, replies).

    python -m bench.redis_instructions                     # 20,000 users
    python -m bench.redis_instructions --against ../other  # and another checkout, side by side
    python -m bench.redis_instructions --smoke             # 1,000 users
    python -m bench.redis_instructions --profile DIR       # and keep each shape's callgrind dump

A kept dump reads with ``callgrind_annotate --inclusive=yes DIR/this-page_view.callgrind``: where a
page view's instructions go in redis-server, by function.

Writes bench/results/redis_instructions.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

BATCH = 1000
FORGET = 120  # seconds the clock moves past what ingest remembers of a day's writes, as bench.capacity's
SHAPES = {
    "last_seen": "last seen only, returning user (API event without path)",
    "page_view": "page view, returning user",
    "first_page_view": "page view, the user's first in this process today",
    "anonymous": "anonymous visit, a new visitor",
    "page_view_below_top": "page view, returning user below the top viewers",
    "page_view_funnels": "page view, returning user below the top viewers, with 20 funnels",
}
# Users given more views than the bench's users reach, as many as the top viewers keep
# (``store.sessions.CANDIDATES``), so the last shape's views stay below the bar, as most of a real
# site's do; in the others every user has as many views as every other and ties it.
TOP_VIEWERS, TOP_VIEWS = 1000, 20
# The last shape's funnels: each of 3 prefix steps (``/p/<digit>*``), so nearly every page is some
# funnels' step 1 and every user's view moves a state on.
FUNNELS = 20


@contextmanager
def callgrind_server() -> Iterator[tuple[str, int, Path]]:
    """A private redis-server under callgrind, its instrumentation off until a ``counted_block``:
    (its URL, its pid, the folder of its dumps)."""
    from project.redis_server import answers, free_port, server_binary

    folder = Path(tempfile.mkdtemp(prefix="redis-instructions-"))
    url = f"redis://127.0.0.1:{(port := free_port())}/0"
    callgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={folder}/callgrind.out"]
    server = subprocess.Popen(
        [*callgrind, server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=folder,
    )
    try:
        deadline = time.monotonic() + 60
        while not answers(url):  # valgrind takes a few seconds to bring the server up
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server under callgrind did not start")
            time.sleep(0.2)
        yield url, server.pid, folder
    finally:
        server.terminate()
        server.wait(timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


def counted_block(pid: int, folder: Path, run: Callable[[], Any]) -> Path:
    """Run ``run`` with the instrumentation of server ``pid`` on: the callgrind dump of what the
    server ran meanwhile (in ``folder``), its count read by ``total``."""
    subprocess.run(["callgrind_control", "--instr=on", str(pid)], check=True, capture_output=True)
    try:
        run()
    finally:
        subprocess.run(["callgrind_control", "--instr=off", str(pid)], check=True, capture_output=True)
    subprocess.run(["callgrind_control", "--dump", str(pid)], check=True, capture_output=True)
    return max(folder.glob("callgrind.out.*"), key=lambda path: int(path.suffix[1:]))  # the newest


def count(checkout: Path, users: int, profile: Path | None = None, label: str = "") -> dict[str, float]:
    """Instructions per event of each shape with ``checkout``'s code (a process of its own, against a
    redis-server of its own under callgrind); with ``profile``, each shape's callgrind dump kept there
    as ``<label>-<shape>.callgrind``."""
    with callgrind_server() as (url, pid, folder):
        env = {
            **os.environ,
            "PYTHONPATH": str(checkout),
            "REDIS_URL": url,
            "ACTIVITY_KEY_PREFIX": "bench:",
            "ACTIVITY_REDIS_TIMEOUT": "120",
            "DATABASE_URL": f"sqlite:///{folder}/db.sqlite3",
            "DJANGO_SETTINGS_MODULE": "project.settings",
        }
        # This file run by path from the checkout, not as a module: the checkout's ``bench`` may not
        # have it, and run as a script its folder would lead sys.path (where bench/http.py shadows
        # ``http``).
        run_this = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
        child = [sys.executable, "-c", run_this, str(Path(__file__).resolve()), "--child", "--users", str(users)]
        child += ["--server-pid", str(pid), "--dumps", str(folder)]
        if profile:
            child += ["--profile", str(profile / label)]
        run = subprocess.run(child, cwd=checkout, env=env, capture_output=True, text=True)
        if run.returncode:
            raise RuntimeError(f"counting {checkout} failed:\n{run.stderr[-3000:]}")
        return json.loads(run.stdout.splitlines()[-1])


def counted_shapes(pid: int, users: int, folder: Path, profile: Path | None) -> dict[str, float]:
    """In the checkout's process: Django on the server ``count`` started, each shape counted from the
    callgrind dumps of server ``pid`` in ``folder``."""
    import django

    django.setup()
    from django.core.management import call_command

    from activity import clock, models
    from activity.events import Event
    from activity.services import ingest

    call_command("migrate", verbosity=0)
    moment = [clock.now()]
    clock.now = lambda: moment[0]  # ingest remembers a day's writes until a moment: moved as needed
    # What the service's callers pass, so a day's writes are left out once made; a checkout from before
    # ``DayWrites`` remembered them in ingest itself.
    written = {"day_writes": ingest.DayWrites()} if hasattr(ingest, "DayWrites") else {}

    def record(*args: Any) -> None:
        ingest.record_events(*args, **written)

    def events(first: int, path: bool) -> list[Event]:
        return [Event(str(n), moment[0], f"/p/{n % 500}" if path else None) for n in range(first, first + BATCH)]

    def visitors(first: int) -> list[tuple[str, float]]:
        return [(f"{n:032x}", moment[0]) for n in range(first, first + BATCH)]

    for first in range(0, users, BATCH):
        record(events(first, True), visitors(first))
    fresh = [users]

    def anonymous(first: int) -> None:
        fresh[0] += BATCH
        record([], visitors(fresh[0]))

    def page_views(first: int) -> None:
        record(events(first, True))

    def top_viewers() -> None:
        for _ in range(TOP_VIEWS):
            record([Event(f"top{n}", moment[0], "/p/top") for n in range(TOP_VIEWERS)])

    def nothing() -> None:
        pass

    def define_funnels() -> None:
        from datetime import UTC, datetime

        from activity.services import funnels

        for k in range(FUNNELS):
            steps = [f"/p/{(k + step) % 9 + 1}*" for step in range(3)]
            models.Funnel.objects.create(name=f"bench {k}", steps=steps, window=3600, mode="sequential")
        models.Funnel.objects.update(created=datetime.fromtimestamp(moment[0] - 3600, UTC))  # before every view
        funnels.forget()

    shapes = {
        "last_seen": (lambda first: record(events(first, False)), 1, nothing),
        "page_view": (page_views, 1, nothing),
        "first_page_view": (page_views, FORGET, nothing),
        "anonymous": (anonymous, 1, nothing),
        "page_view_below_top": (page_views, 1, top_viewers),
        "page_view_funnels": (page_views, 1, define_funnels),
    }
    if not hasattr(models, "Funnel"):  # a checkout from before the funnels
        del shapes["page_view_funnels"]
    counts = {}
    for name, (send, step, prepare) in shapes.items():
        prepare()

        def send_all(send: Callable[[int], None] = send, step: int = step) -> None:
            moment[0] += step
            for first in range(0, users, BATCH):
                send(first)

        send_all()  # a warm-up pass, then the counted one
        dump = counted_block(pid, folder, send_all)
        counts[name] = total(dump) / users
        if profile:
            shutil.copy(dump, f"{profile}-{name}.callgrind")
    return counts


def total(dump: Path) -> int:
    """The instructions a callgrind dump counted."""
    for line in dump.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError(f"no total in {dump}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--smoke", action="store_true", help="seconds: 1,000 users")
    parser.add_argument("--against", type=Path, help="also count with this checkout's code")
    parser.add_argument("--profile", type=Path, help="keep each shape's callgrind dump in this folder")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dumps", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    users = 1000 if options.smoke else options.users
    if options.child:
        print(json.dumps(counted_shapes(options.server_pid, users, options.dumps, options.profile)))
        return
    from bench import harness  # here, not at the top: a child runs with another checkout's packages

    here = Path(__file__).resolve().parent.parent
    if options.profile:
        options.profile = options.profile.resolve()  # the children run in their checkouts
        options.profile.mkdir(parents=True, exist_ok=True)
    figures = {"this": count(here, users, options.profile, "this")}
    if options.against:
        figures["against"] = count(options.against.resolve(), users, options.profile, "against")
    compared = ["against", "this / against"] if options.against else []
    table = [["ingest shape", "Redis instructions per event", *compared]]
    for key, name in SHAPES.items():
        row = [name, f"{figures['this'][key]:,.0f}"]
        if options.against and key in figures["against"]:
            row += [f"{figures['against'][key]:,.0f}", f"{figures['this'][key] / figures['against'][key]:.3f}x"]
        elif options.against:
            row += ["(not in that checkout)", ""]
        table.append(row)
    command = "python -m bench.redis_instructions" + (" --smoke" if options.smoke else f" --users {users}")
    command += f" --against {options.against}" if options.against else ""
    revisions = {name: git_revision(path) for name, path in (("this", here), ("against", options.against)) if path}
    notes = (
        f"{users:,} users, each with a page view and a visit; per shape one warm-up pass and one counted pass "
        f"of {users:,} events in batches of {BATCH:,}, everything redis-server ran meanwhile counted by "
        f"callgrind. Commits: {', '.join(f'{name} {rev}' for name, rev in revisions.items())}. Command: `{command}`."
    )
    harness.write("redis_instructions", {"users": users, "commits": revisions, "per_event": figures}, table, notes)
    print("\n".join(" | ".join(row) for row in table))


def git_revision(path: Path) -> str:
    run = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return run.stdout.strip() or "unknown"


if __name__ == "__main__":
    main()
