"""Which of ``count`` partitions (hash tags) holds an id: the one rule last seen, the funnels and the
group index spread people by, so a Cluster spreads their writes and reads."""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable


def partition_of(ident: str, count: int) -> int:
    """CRC-32 of the id modulo ``count``: the same in every process and release (``hash`` of a
    string is salted per process)."""
    return zlib.crc32(ident.encode()) % count


def spread(idents: Iterable[str], count: int) -> dict[int, list[str]]:
    """``idents`` grouped by partition (first-seen order kept within each)."""
    found: dict[int, list[str]] = defaultdict(list)
    for ident in idents:
        found[partition_of(ident, count)].append(ident)
    return found
