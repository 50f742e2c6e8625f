"""Group views (docs/groups.md): per-group sorted sets of member -> last seen, built on demand and
published whole (RENAME), so a reader sees no view or a complete one. Updates are ``ZADD XX GT`` in
views that exist: they never create a view, add a member or move a score back.

And each group's membership as a bitmap by dense id (``store.people``, ``{au}``), as the active-user
bitmaps are, so the members active in a day, week or month are one BITOP AND and one BITCOUNT in
one script."""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import date

from activity.calendar import PERIODS, name_of
from activity.store import keys, partitioning, people
from activity.store.audience import BITS
from activity.store.client import PER_CALL, Client, Reply, Sum, chunks
from activity.store.scripts import LuaScript, Pipeline

PUBLISH = LuaScript("group_view_publish")
DROP = LuaScript("group_view_drop")
INDEX_EDIT = LuaScript("group_index_edit")
GROUP_ACTIVE = LuaScript("group_active")

NEVER = -1.0  # score of a member never seen: below every real epoch time
BUILD_TTL_MS = 30_000  # a builder that dies leaves its temporary key for at most this long
INDEX_SLACK = 60  # seconds the user -> groups index outlives the views it points to
# Hash tags {grp-index:0}..{grp-index:15} the user -> groups index is spread over, so a Cluster
# spreads the read every event's batch makes; changing it re-homes every entry, so it is fixed.
INDEX_PARTITIONS = 16
ZADD_CHUNK = 1000

# group id -> {user id: last seen}
Updates = Mapping[int, Mapping[str, float]]


def read_page(client: Client, group_id: int, start: int, stop: int) -> tuple[int, list[tuple[str, float]], str]:
    """(member count, members ranked start..stop most recent first, membership epoch); one round
    trip. A count of 0: no view (a group without members has none either)."""
    view = keys.group_view(group_id)
    pipe = client.pipeline(transaction=False)
    pipe.zcard(view)
    pipe.zrevrange(view, start, stop, withscores=True)
    pipe.get(keys.group_epoch(group_id))
    count, rows, epoch = pipe.execute()
    return count, rows, epoch or ""


def epoch(client: Client, group_id: int) -> str:
    return client.get(keys.group_epoch(group_id)) or ""


def build(client: Client, group_id: int, scores: Mapping[str, float | None], seen_epoch: str, ttl: int) -> bool:
    """Materialize a group's view; False when a membership change raced it. Two round trips: add the
    group to each member's index entry (the index outlives the view by ``INDEX_SLACK``), then one
    MULTI filling a temporary key and publishing it only if the epoch is still ``seen_epoch``. The
    index first, so from the publish on every event of a member finds the view.
    Concurrent builders each use their own key, so the last publish wins with an equally complete view."""
    edit = client.pipeline(transaction=False)
    _queue_index_edit(edit, group_id, scores, True, ttl)
    edit.execute()
    temp = keys.group_view_build(group_id, secrets.token_hex(8))
    view_ttl_ms = int(ttl * 1000)
    pipe = client.pipeline(transaction=True)
    for batch in chunks(scores.items(), ZADD_CHUNK):
        pipe.zadd(temp, {member: NEVER if score is None else score for member, score in batch})
        pipe.pexpire(temp, BUILD_TTL_MS)
    published_at = pipe.script(
        PUBLISH, [temp, keys.group_view(group_id), keys.group_epoch(group_id)], [seen_epoch, view_ttl_ms]
    )
    pipe.execute()
    return published_at.value == 1


def index_key(user: str) -> str:
    """The user -> groups index hash holding ``user``'s entry."""
    return keys.user_groups(partitioning.partition_of(user, INDEX_PARTITIONS))


class GroupIndexes:
    """The group index entries of a batch's users, queued as one ``HMGET`` per index partition of
    at most ``PER_CALL`` users each (nothing to read while no view is built: the index does not
    exist); ``grouped`` reads them once the pipeline has run."""

    def __init__(self, pipe: Pipeline, users: Iterable[str]) -> None:
        self.calls: list[tuple[list[str], Reply]] = []
        for partition, own in partitioning.spread(users, INDEX_PARTITIONS).items():
            for chunk in chunks(own, PER_CALL):
                pipe.hmget(keys.user_groups(partition), chunk)
                self.calls.append((chunk, pipe.reply()))

    def grouped(self) -> dict[str, list[str]]:
        """Each user in some built group view -> its group ids."""
        return {
            user: entry_ids(entry)
            for users, reply in self.calls
            for user, entry in zip(users, reply.value, strict=True)
            if entry
        }


def entry_ids(entry: str | None) -> list[str]:
    """The group ids of a user's index entry (None: the user has none)."""
    return entry.split(",") if entry else []


def upsert(client: Client, updates: Updates) -> int:
    """Apply last-seen updates to the views that exist; returns how many (view, member) moved. One
    round trip, a ``ZADD XX GT CH`` per view: XX adds no member and makes no missing view (one an
    update made would lack the group's other members: membership is the build's job), GT never
    moves a score back."""
    pipe = client.pipeline(transaction=False)
    moved = Sum()
    for group_id, scores in updates.items():
        if scores:
            pipe.zadd(keys.group_view(group_id), dict(scores), xx=True, gt=True, ch=True)
            moved.replies.append(pipe.reply())
    if moved.replies:
        pipe.execute()
    return moved.value


def drop(client: Client, group_ids: Iterable[int], removed: Iterable[tuple[int, str]], ttl: int) -> None:
    """Membership changed: bump each group's epoch (discarding a build in flight) and delete its
    view (``lua/group_view_drop.lua``, a call per group, in the group's slot), and take the group
    out of removed members' index entries; one round trip. The epoch outlives any build, so none
    sees it expire and come back with the value it read. An entry that outlives its view (a build in
    flight added it again) costs an event a ``ZADD XX`` that changes nothing: a view lists only the
    members its build read, and the entries expire with the views."""
    pipe = client.pipeline(transaction=False)
    for group_id in set(group_ids):
        pipe.script(DROP, [keys.group_epoch(group_id), keys.group_view(group_id)], [ttl + INDEX_SLACK])
    leaving: dict[int, list[str]] = defaultdict(list)
    for group_id, user in removed:
        leaving[group_id].append(user)
    for group_id, users in leaving.items():
        _queue_index_edit(pipe, group_id, users, False, ttl)
    if len(pipe):
        pipe.execute()


def _queue_index_edit(pipe: Pipeline, group_id: int, users: Iterable[str], adding: bool, ttl: int) -> None:
    """Queue adding ``group_id`` to the users' index entries (or taking it out), one call per index
    partition and ``PER_CALL`` users; an add keeps the index at least ``INDEX_SLACK`` beyond a view
    of ``ttl`` seconds."""
    for partition, own in partitioning.spread(users, INDEX_PARTITIONS).items():
        for chunk in chunks(own, PER_CALL):
            args = [group_id, int(adding), ttl + INDEX_SLACK, *chunk]
            pipe.script(INDEX_EDIT, [keys.user_groups(partition)], args)


# --- membership bitmaps ({au}) -------------------------------------------------------------------


def write_members(
    client: Client,
    added: Sequence[tuple[int, str]],
    removed: Sequence[tuple[int, str]],
    deleted: Iterable[int],
    now: float,
) -> None:
    """Mirror committed membership changes into the groups' bitmaps, (group id, user) pairs, then
    delete the bitmaps of ``deleted`` groups: the members' dense ids (assigned where missing) in one
    round trip, then one MULTI (every key is ``{au}``). A user erased and still tombstoned is left out."""
    dense = people.assign(client, sorted({user for _, user in (*added, *removed)}), now)
    pipe = client.pipeline(transaction=True)
    for pairs, value in ((removed, 0), (added, 1)):
        for group_id, user in pairs:
            if user in dense:
                pipe.setbit(keys.group_members(group_id), dense[user], value)
    for group_id in set(deleted):
        pipe.delete(keys.group_members(group_id))
    if len(pipe):
        pipe.execute()


def _bitmap(offsets: Iterable[int]) -> bytes:
    """The bitmap with exactly ``offsets`` set, as SETBIT lays it out (bit 0 = the first byte's high bit)."""
    offsets = list(offsets)
    bits = bytearray(max(offsets) // 8 + 1 if offsets else 0)
    for offset in offsets:
        bits[offset >> 3] |= 0x80 >> (offset & 7)
    return bytes(bits)


def replace_members(client: Client, members: Mapping[int, Sequence[str]], now: float) -> int:
    """Replace each group's bitmap by one holding exactly its ``members`` (by dense id, assigned
    where missing; a tombstoned user left out): one SET per group, atomic, or a DEL when it has
    none; two round trips. Returns the bits written."""
    dense = people.assign(client, sorted({user for users in members.values() for user in users}), now)
    pipe = client.pipeline(transaction=False)
    written = 0
    for group_id, users in members.items():
        offsets = {dense[user] for user in users if user in dense}
        written += len(offsets)
        if offsets:
            pipe.set(keys.group_members(group_id), _bitmap(offsets))
        else:
            pipe.delete(keys.group_members(group_id))
    pipe.execute()
    return written


def active_members(client: Client, group_ids: Sequence[int], period: str, day: date) -> list[int]:
    """Members of each group active in the ``period`` (day, week or month) holding ``day``, in
    ``group_ids`` order: one EVALSHA per group, all in one round trip, each bounded by the number of
    people (a bit each)."""
    if not group_ids:
        return []
    active = BITS[PERIODS.index(period)](name_of(period, day))
    scratch = keys.group_active_scratch()
    pipe = client.pipeline(transaction=False)
    for group_id in group_ids:
        pipe.script(GROUP_ACTIVE, [keys.group_members(group_id), active, scratch], [])
    return [int(count) for count in pipe.execute()]
