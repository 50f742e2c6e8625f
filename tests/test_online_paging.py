"""Online paging (keyset cursor over the last-seen set) costs the same on every page, however many
users share one timestamp, and stays exact when the cursor's own user moves on or is pruned."""

from __future__ import annotations

import math

from activity import clock
from activity.services import last_seen
from activity.store import last_seen as store
from tests.redis_counts import CommandDelta

TIES = 5000
SORTED_SET_READS = ("zrange", "zrangebyscore", "zrevrangebyscore", "zscore", "zrevrank", "zcount")


def test_paging_5000_tied_users_reads_one_page_per_page(staff, staff_api, redis_client):
    ts = round(clock.now() - 100, 3)
    tied = [f"u{i:04d}" for i in range(TIES)]
    last_seen.seed(dict.fromkeys(tied, ts))
    seen: list[str] = []
    work = []
    url = "/api/v1/online/?within=1000&page_size=100"
    while url:
        with CommandDelta(redis_client) as delta:
            page = staff_api.get(url).json()
        work.append({name: delta.calls[name] for name in SORTED_SET_READS})
        seen += [row["user"] for row in page["results"]]
        url = page["next"]
    # Everyone exactly once, in order (ties by user id, descending). The staff user's own requests are
    # tracked at a later time, above the cursor, so they appear at most once, first.
    assert [user for user in seen if user != str(staff.pk)] == sorted(tied, reverse=True)
    assert seen.count(str(staff.pk)) <= 1
    assert len(work) == TIES // 100
    # One page a partition per request, found by rank in the partition of the cursor's user and by a
    # binary search among the ties in the others: O(log ties) reads a partition, as many on the last
    # page as on the 2nd. The old loop re-read the ties from the top, doubling its fetch until it got
    # past the cursor, so its work grew with the page's position among the ties.
    assert all(calls["zrange"] <= store.partition_count() * (2 + math.ceil(math.log2(TIES + 1))) for calls in work)
    later = [calls["zrange"] for calls in work[1:]]
    assert max(later) - min(later) <= store.partition_count()  # a search step more or less, not growth


def test_cursor_whose_user_moved_forward_or_was_pruned(redis_client):
    ts = 1_790_000_000.0
    tied = [f"u{i:04d}" for i in range(1000)]
    above, below = [f"a{i}" for i in range(10)], [f"b{i}" for i in range(10)]
    last_seen.seed({**dict.fromkeys(tied, ts), **dict.fromkeys(above, ts + 1)})
    last_seen.seed(dict.fromkeys(below, ts - 1))
    seen: list[str] = []
    cursor = None
    for turn in range(1000):
        with CommandDelta(redis_client) as delta:
            rows = store.page_and_count_since(redis_client, ts - 10, 37, cursor)[0]
        # The cursor's user gone from its place: a binary search among each partition's ties, O(log
        # ties) steps.
        assert delta.calls["zrange"] <= store.partition_count() * (2 + math.ceil(math.log2(len(tied) + 1)))
        if not rows:
            break
        seen += [user for user, _ in rows]
        cursor = (rows[-1][1], rows[-1][0])
        if turn % 2:
            last_seen.seed({rows[-1][0]: ts + 5})  # seen again later: moves to the top
        else:
            redis_client.zrem(store.partition_of(rows[-1][0]).seen, rows[-1][0])  # pruned
    assert seen == sorted(above, reverse=True) + sorted(tied, reverse=True) + sorted(below, reverse=True)
