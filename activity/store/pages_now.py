"""Pages now (docs/live.md): the page each online person is on, and how many people each page has.
Page views set each person's latest page (``lua/pages_now_record.lua``); people whose latest view
left the online window are taken out in bounded calls (``lua/pages_now_prune.lua``), by the writes,
each taking out up to twice as many as it records, and by a read until none is left, so a read
ranks exactly the people online in one more command."""

from __future__ import annotations

from collections.abc import Sequence

from activity.store import keys
from activity.store.client import PER_CALL, Client, Reply, chunks
from activity.store.scripts import LuaScript, Pipeline

RECORD = LuaScript("pages_now_record")
PRUNE = LuaScript("pages_now_prune")
FORGET = LuaScript("pages_now_forget")

# People a read takes out per call: its calls' time in Redis stays under a millisecond or two.
PRUNE_PER_READ = 1000


def _record_keys() -> list[str]:
    return [tombstones_key(), keys.now_latest(), keys.now_page(), keys.now_people()]


def _state_keys() -> list[str]:
    return [keys.now_latest(), keys.now_page(), keys.now_people()]


def queue_views(pipe: Pipeline, views: Sequence[tuple[str, float, str]], cutoff: float, now: float) -> None:
    """Queue the (person, ts, path) views, ``PER_CALL`` a call, then take out up to twice as many
    people gone offline (latest view before ``cutoff``): the people a read must take out stay few
    while views come."""
    for group in chunks(views, PER_CALL):
        args: list[str | int] = [repr(now), keys.now_ttl()]
        for person, ts, path in group:
            args += [person, repr(ts), path]
        pipe.script(RECORD, _record_keys(), args)
    if views:
        pipe.script(PRUNE, _state_keys(), [repr(cutoff), 2 * len(views)])


def top(client: Client, cutoff: float, n: int) -> list[tuple[str, int]]:
    """The ``n`` pages with the most people whose latest view is at ``cutoff`` or later, as (path,
    people), most first, ties by path: one round trip, and one more per ``PRUNE_PER_READ`` people
    gone offline since the last write took them out."""
    while True:
        pipe = client.pipeline(transaction=False)
        left = pipe.script(PRUNE, _state_keys(), [repr(cutoff), PRUNE_PER_READ])
        pipe.zrange(keys.now_people(), 0, n - 1, withscores=True)
        ranked = pipe.execute()[-1]
        if not left.value:
            return [(path, -int(score)) for path, score in ranked]


def queue_forget(pipe: Pipeline, person: str) -> Reply:
    """Queue taking ``person`` out, for an erase, which tombstones them in ``tombstones_key()`` first;
    the reply is 1 when they were there."""
    return pipe.script(FORGET, _state_keys(), [person])


def tombstones_key() -> str:
    """Where an erase tombstones a person for the record script."""
    return keys.tombstones("now")
