"""Online paging (keyset cursor over the last-seen set) costs the same on every page, however many
users share one timestamp, and stays exact when the cursor's own user moves on or is pruned."""

from __future__ import annotations

import math

from activity import clock
from activity.store import keys
from activity.store import last_seen as store
from tests.redis_counts import CommandDelta

TIES = 5000
SORTED_SET_READS = ("zrange", "zrangebyscore", "zrevrangebyscore", "zscore", "zrevrank", "zcount")


def test_paging_5000_tied_users_reads_one_page_per_page(staff, staff_api, redis_client):
    ts = round(clock.now() - 100, 3)
    tied = [f"u{i:04d}" for i in range(TIES)]
    store.update(redis_client, dict.fromkeys(tied, ts), clock.now())
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
    # One ZRANGE of one page per request, and the same sorted-set reads on the last page as on the
    # 2nd: the old loop re-read the ties from the top, doubling its fetch until it got past the
    # cursor, so its work grew with the page's position among the ties.
    assert all(calls["zrange"] == 1 for calls in work)
    assert all(calls == work[1] for calls in work[1:])


def test_cursor_whose_user_moved_forward_or_was_pruned(redis_client):
    ts = 1_790_000_000.0
    tied = [f"u{i:04d}" for i in range(1000)]
    above, below = [f"a{i}" for i in range(10)], [f"b{i}" for i in range(10)]
    store.update(redis_client, {**dict.fromkeys(tied, ts), **dict.fromkeys(above, ts + 1)}, ts)
    store.update(redis_client, dict.fromkeys(below, ts - 1), ts)
    seen: list[str] = []
    cursor = None
    for turn in range(1000):
        with CommandDelta(redis_client) as delta:
            rows = store.page_since(redis_client, ts - 10, 37, cursor)
        # The cursor's user gone from its place: a binary search among the ties, O(log ties) steps.
        assert delta.calls["zrange"] <= 2 + math.ceil(math.log2(len(tied) + 1))
        if not rows:
            break
        seen += [user for user, _ in rows]
        cursor = (rows[-1][1], rows[-1][0])
        if turn % 2:
            store.update(redis_client, {rows[-1][0]: ts + 5}, ts)  # seen again later: moves to the top
        else:
            redis_client.zrem(keys.last_seen(), rows[-1][0])  # pruned
    assert seen == sorted(above, reverse=True) + sorted(tied, reverse=True) + sorted(below, reverse=True)
