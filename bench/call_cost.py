"""What a script call costs redis-server, in instructions counted by callgrind: whether the page-view
scripts could take fixed, small calls (at most 8 keys: 4 views a call for the sessions) in place of
calls of 200 (docs/capacity.md).

Against a private redis-server under callgrind (started as ``bench.redis_instructions`` starts
its own), ``lua/session_record.lua`` is called directly, its keys and arguments as its header gives
them, for returning users viewing the same page again: at 200, 4, 1 and 0 views a call, by EVALSHA
and as a function of a Redis Functions library (FCALL), beside a script that only returns. A call
with no view is then timed part by part, the script cut short (``return 0``) before each of its
top-level statements. Last, a view in calls of 200 against scripts that do less: a step from the
user's last page, transitions off, and scripts that only append (``RPUSH`` and ``PEXPIRE``, and
``LINDEX`` before them), beside one that appends into a per-partition layout of fixed keys: each
user's entries in one field of a hash (read, appended to, written back) and the session's end in a
sorted set, the TTL's stand-in.

    python -m bench.call_cost           # 800 views a run
    python -m bench.call_cost --smoke   # 40

Writes bench/results/call_cost.json and .md.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from bench import harness
from bench.redis_instructions import callgrind_server, counted_block, total

SIZES = (200, 4, 1, 0)
Send = Callable[[Any, list], Any]  # queues one call (the keys' count, keys, arguments) on a pipeline
WINDOW_MS, KEEP, DAY = 60_000, 50, 86_400
# Scripts that do less than session_record, with its keys and arguments (its first 4 keys and 10
# arguments, the window in ARGV[4]; then a session key per view, and a user and entry each): each
# view appended and its list's TTL renewed, with ``{read}`` before.
APPENDING = """
-- KEYS[5..] session lists; ARGV[4] the window, ms; ARGV[2 i + 2] key i's entry. Returns 0.
for i = 5, #KEYS do
  {read}
  redis.call('RPUSH', KEYS[i], ARGV[2 * i + 2])
  redis.call('PEXPIRE', KEYS[i], ARGV[4])
end
return 0"""
# The same appends into a per-partition layout, keys that do not grow with the call: the sessions of
# the partition's users in one hash, their ends in one sorted set (for a prune to act on: Redis 7.0
# has no per-field expiry).
PARTITIONED = """
-- KEYS[1] sessions (hash: user -> entries, newline-joined), KEYS[2] their ends (zset: user -> ms);
-- ARGV[1] the window, ms; ARGV[2] now, ms; ARGV[3..] a user and an entry per view. Returns 0.
local ends = string.format('%d', tonumber(ARGV[2]) + tonumber(ARGV[1]))
for a = 3, #ARGV, 2 do
  local entries = redis.call('HGET', KEYS[1], ARGV[a])
  redis.call('HSET', KEYS[1], ARGV[a], entries and entries .. '\\n' .. ARGV[a + 1] or ARGV[a + 1])
  redis.call('ZADD', KEYS[2], ends, ARGV[a])
end
return 0"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--views", type=int, default=800, help="views (and users) a run")
    parser.add_argument("--smoke", action="store_true", help="seconds: 40 views a run")
    options = parser.parse_args()
    views = 40 if options.smoke else options.views
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    import redis

    from activity.store.scripts import LuaScript
    from activity.store.sessions import entry

    source = LuaScript("session_record").source.decode()
    with callgrind_server() as (url, pid, folder), redis.Redis.from_url(url) as client:
        day = int(time.time() // DAY * DAY)
        now = day + DAY / 2  # noon: the views' times, a millisecond apart a call, stay in the declared day
        moment = [now]

        def call_args(users: range, transitions: str, step: bool) -> list:
            """session_record's keys (after their count) and arguments for ``users``' views now: the
            fence's unguarded pair, one day declared, the window, pages kept, TTL, transitions, now."""
            moment[0] += 0.001
            script_keys = ["", "c:erased", "c:started", "c:steps"] + [f"c:session:{user}" for user in users]
            args = [
                "",
                "60",
                "1",
                str(WINDOW_MS),
                str(KEEP),
                str(DAY),
                transitions,
                repr(now),
                str(day),
                str(day + DAY),
            ]
            for user in users:
                page = (user + round(moment[0] * 1000)) % 7 if step else user % 7
                args += [str(user), entry(f"/p/{page}", moment[0])]
            return [len(script_keys), *script_keys, *args]

        def partitioned_args(users: range, sessions: str) -> list:
            """``PARTITIONED``'s keys (after their count: the hash ``sessions``, the ends) and
            arguments for ``users``' views now."""
            moment[0] += 0.001
            args = [str(WINDOW_MS), str(round(moment[0] * 1000))]
            for user in users:
                args += [str(user), entry(f"/p/{user % 7}", moment[0])]
            return [2, sessions, "c:ends", *args]

        def call_starts(per_call: int) -> range:
            """The first view of each call of a run, ``per_call`` views a call (``views`` calls of none)."""
            return range(0, views, per_call or 1)

        def per_run(
            send: Send,
            per_call: int,
            transitions: str = "1",
            step: bool = False,
            built: Callable[[range], list] | None = None,
        ) -> int:
            """Instructions of one run of ``views`` views ``per_call`` a call (``views`` calls of none
            at 0), after a warm-up run; each call's keys and arguments ``session_record``'s, or
            ``built``'s."""

            def run() -> None:
                pipe = client.pipeline(transaction=False)
                for first in call_starts(per_call):
                    users = range(first, min(first + per_call, views))
                    send(pipe, built(users) if built else call_args(users, transitions, step))
                pipe.execute()

            run()
            return total(counted_block(pid, folder, run))

        def by_sha(sha: str) -> Send:
            return lambda pipe, call: pipe.evalsha(sha, *call)

        sha = client.script_load(source)
        client.function_load(
            "#!lua name=call_cost\n"
            f"redis.register_function('session_record', function(KEYS, ARGV)\n{source}\nend)\n"
            "redis.register_function('nothing', function(KEYS, ARGV) return 1 end)\n",
            replace=True,
        )
        nothing = client.script_load("return 1")
        evalsha: Send = by_sha(sha)

        def fcall(pipe: Any, call: list) -> None:
            pipe.fcall("session_record", *call)

        # 1. A call's cost and a view's, by call size, EVALSHA and FCALL.
        calls = {
            "EVALSHA": per_run(lambda pipe, _: pipe.evalsha(nothing, 1, "x"), 0) / views,
            "FCALL": per_run(lambda pipe, _: pipe.fcall("nothing", 1, "x"), 0) / views,
        }
        table = [["call", "EVALSHA, per call", "a view", "FCALL, per call", "a view"]]
        table.append(["`return 1`, one key", f"{calls['EVALSHA']:,.0f}", "", f"{calls['FCALL']:,.0f}", ""])
        sizes = {}
        for size in SIZES:
            found = {name: per_run(send, size) for name, send in (("EVALSHA", evalsha), ("FCALL", fcall))}
            per_call = {name: count / len(call_starts(size)) for name, count in found.items()}
            sizes[size] = {name: {"per_call": per_call[name], "per_view": found[name] / views} for name in found}
            shown = min(size, views)
            row = [f"`session_record`, {shown} view{'' if shown == 1 else 's'} a call"]
            for name in found:
                row += [f"{per_call[name]:,.0f}", f"{found[name] / views:,.0f}" if size else ""]
            table.append(row)

        # 2. A call with no view, part by part: the script cut short before each top-level statement,
        # a part's cost the difference between the cuts before and after it.
        lines = source.split("\n")
        starts = [n for n, line in enumerate(lines) if line[:1].isalpha() and not line.startswith(("end", "else"))]
        cuts = []
        for n in [*starts, len(lines)]:
            try:
                cut = client.script_load("\n".join(lines[:n]) + "\nreturn 0")
            except redis.ResponseError:  # a cut Lua cannot compile (inside a statement): no part there
                continue
            cuts.append((n, per_run(by_sha(cut), 0) / views))
        parts = [{"part": "the call, to the script's first statement", "instructions": cuts[0][1]}]
        parts += [{"part": lines[a].strip(), "instructions": cb - ca} for (a, ca), (_, cb) in pairwise(cuts)]
        parts_table = [["a call with no view: part (from its first statement)", "instructions"]]
        parts_table += [
            [f"`{p['part'][:70]}`", f"{p['instructions']:,.0f}"] for p in parts if p["instructions"] >= 1000
        ]
        parts_table.append(["in all", f"{cuts[-1][1]:,.0f}"])

        # 3. A view in calls of 200 against scripts that do less.
        append = client.script_load(APPENDING.format(read=""))
        read_and_append = client.script_load(APPENDING.format(read="redis.call('LINDEX', KEYS[i], '-1')"))
        variants = {
            "`session_record`, the same page again": per_run(evalsha, 200),
            "`session_record`, each view a step from the last page": per_run(evalsha, 200, step=True),
            "`session_record`, transitions off": per_run(evalsha, 200, transitions="0"),
            "`LINDEX`, `RPUSH` and `PEXPIRE` a view": per_run(by_sha(read_and_append), 200),
            "`RPUSH` and `PEXPIRE` a view": per_run(by_sha(append), 200),
        }
        # The per-partition layout twice: on new sessions (a page, then a second), then on sessions
        # of as many pages as the lists hold now.
        partitioned = by_sha(client.script_load(PARTITIONED))
        hashed = "a per-partition hash: `HGET`, `HSET` and a `ZADD` of the end a view, 2 keys a call"
        variants[f"{hashed}, new sessions"] = per_run(
            partitioned, 200, built=lambda users: partitioned_args(users, "c:new-sessions")
        )
        lists = [client.lrange(f"c:session:{user}", 0, -1) for user in range(views)]
        client.hset("c:sessions", mapping={str(user): b"\n".join(found) for user, found in enumerate(lists)})
        variants[f"{hashed}, sessions as long as the lists ({len(lists[0])} pages)"] = per_run(
            partitioned, 200, built=lambda users: partitioned_args(users, "c:sessions")
        )
        variants_table = [["calls of 200", "instructions a view"]]
        variants_table += [[name, f"{count / views:,.0f}"] for name, count in variants.items()]

    command = "python -m bench.call_cost" + (" --smoke" if options.smoke else f" --views {views}")
    notes = (
        f"redis-server instructions (callgrind), {views:,} returning users' views a run, each case after a "
        f"warm-up run.\n\n{harness.markdown(parts_table)}\n\nParts under 1,000 instructions are left out "
        f"(the JSON has them all).\n\n{harness.markdown(variants_table)}\n\nCommand: `{command}`."
    )
    results = {
        "views": views,
        "return_1": calls,
        "session_record": sizes,
        "parts": parts,
        "variants": {name: count / views for name, count in variants.items()},
    }
    harness.write("call_cost", results, table, notes)
    print("\n".join(" | ".join(row) for row in table))


if __name__ == "__main__":
    main()
