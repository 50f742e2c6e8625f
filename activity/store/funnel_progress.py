"""A person's progress in the funnels (docs/funnels.md) as Redis keeps it, and how page views move it.

The state is one JSON string: ``{"t": <the latest view taken>, "f": {<funnel id>: {"p": ..., "c": ...}}}``
where, per funnel,

- ``p`` maps each period of an entry still current (``d:YYYYMMDD``, ``w:YYYYWww``, ``m:YYYYMM``) to
  the highest step the person is counted at there, so each person counts once per step and period;
- ``c`` holds the chains in progress, ``[level, entry ts, entry day, week, month]``: after ``level``
  steps matched from an entry, one per level and entry day, the latest entry (it reaches as far as
  any earlier one of that day, and counts in the same periods).

The write path advances a batch's people here, in the process that records the batch, and writes
each state back only if it is still the one read (``lua/funnel_commit.lua``): run in a script, this
work cost Redis more CPU than the rest of a page view's funnel work, and Redis is the one part of
the service that does not scale out (``bench.funnels``)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Periods = tuple[str, str, str]  # a view's day, week and month: d:YYYYMMDD, w:YYYYWww, m:YYYYMM


@dataclass(frozen=True, slots=True)
class Funnel:
    """What the progress needs of a funnel's definition."""

    id: int
    strict: bool
    window: int  # seconds
    steps: int


@dataclass(frozen=True, slots=True)
class View:
    """A page view of the person whose views it is among: ``matches`` are the (funnel id, step) pairs
    its path matches (none: it still ends the strict funnels' chains and is the person's latest view)."""

    ts: float
    matches: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Advanced:
    """A person's state after a batch's views, and the counts they add: (the entry's month,
    ``m:YYYYMM``; the field ``<funnel>:<period>:<step>``) -> 1."""

    state: str
    added: Counter[tuple[str, str]]


def advance(state: str | None, views: Sequence[tuple[View, Periods]], funnels: Mapping[int, Funnel]) -> Advanced | None:
    """The person's state after ``views`` in arrival order, each with its periods; None when no view
    is taken. A view is taken when it is not older than the latest taken, or, for a person with no
    state, when it enters a funnel (matches a step 1). A sequential funnel moves on with the views
    matching one of its steps; a strict one, while a chain is in progress, with every view: a chain
    that the next view does not advance ends. Funnels not in ``funnels`` are dropped."""
    found: dict[str, Any] = json.loads(state) if state else {"t": None, "f": {}}
    latest, progress = found["t"], found["f"]
    added: Counter[tuple[str, str]] = Counter()
    taken = False
    for view, periods in views:
        enters = any(step == 1 for _, step in view.matches)
        if not (view.ts >= latest if latest is not None else enters):
            continue
        latest, taken = view.ts, True
        matched: dict[int, set[int]] = {}
        for funnel_id, step in view.matches:
            matched.setdefault(funnel_id, set()).add(step)
        for funnel in funnels.values():
            steps = matched.get(funnel.id)
            own = progress.get(str(funnel.id))
            if own is None and steps and 1 in steps:
                own = progress[str(funnel.id)] = {"p": {}, "c": []}
            if own is not None and (steps or (funnel.strict and own["c"])):
                _take(funnel, own, view.ts, periods, steps or set(), added)
    if not taken:
        return None
    kept = {key: own for key, own in progress.items() if int(key) in funnels}
    return Advanced(state=json.dumps({"t": latest, "f": kept}, separators=(",", ":")), added=added)


def _take(
    funnel: Funnel, own: dict[str, Any], ts: float, periods: Periods, steps: set[int], added: Counter[tuple[str, str]]
) -> None:
    """One view taken by one funnel: the chains it advances (a strict funnel's others end), a new one
    when it matches step 1; then the latest entry per level and day, and the periods still needed."""
    kept: dict[tuple[int, str], list[Any]] = {}

    def keep(chain: list[Any]) -> None:
        other = kept.get((chain[0], chain[2]))
        if other is None or other[1] < chain[1]:
            kept[(chain[0], chain[2])] = chain

    for chain in own["c"]:
        if chain[1] + funnel.window >= ts:
            level = chain[0] + 1
            if level in steps:
                moved = [level, *chain[1:]]
                _count(funnel.id, own, moved, added)
                if level < funnel.steps:
                    keep(moved)
            elif not funnel.strict:
                keep(chain)
    if 1 in steps:
        entry = [1, ts, *periods]
        _count(funnel.id, own, entry, added)
        keep(entry)
    needed = {*periods, *(name for chain in kept.values() for name in chain[2:])}
    own["p"] = {name: level for name, level in own["p"].items() if name in needed}
    own["c"] = list(kept.values())


def _count(funnel_id: int, own: dict[str, Any], chain: list[Any], added: Counter[tuple[str, str]]) -> None:
    """Count the person at every step up to the chain's level past the one they are counted at, in
    each period of the chain's entry (in the counts of the entry's month)."""
    level, month = chain[0], chain[4]
    for name in chain[2:]:
        was = own["p"].get(name, 0)
        for step in range(was + 1, level + 1):
            added[(month, f"{funnel_id}:{name}:{step}")] += 1
        if was < level:
            own["p"][name] = level


def merge(user: str | None, visitor: str | None) -> str | None:
    """The user's state with the visitor's folded in; None when the visitor has none. Per funnel:
    the chains in progress of both (per level and day of entry the latest entry, as ``advance``
    keeps one person's), and per period the higher step counted, so the merged person is never
    counted again at a step either was counted at; the latest view taken is the later of the two."""
    if not visitor:
        return None
    if not user:
        return visitor
    ours, theirs = json.loads(user), json.loads(visitor)
    merged: dict[str, Any] = ours["f"]
    for funnel, their in theirs["f"].items():
        own = merged.get(funnel)
        if own is None:
            merged[funnel] = their
            continue
        counted = dict(own["p"])
        for period, step in their["p"].items():
            counted[period] = max(counted.get(period, 0), step)
        latest: dict[tuple[Any, Any], list[Any]] = {}
        for chain in [*own["c"], *their["c"]]:
            slot = (chain[0], chain[2])
            if slot not in latest or latest[slot][1] < chain[1]:
                latest[slot] = chain
        merged[funnel] = {"p": counted, "c": list(latest.values())}
    return json.dumps({"t": max(ours["t"], theirs["t"]), "f": merged}, separators=(",", ":"))


def exported(state: str | None) -> dict[str, Any]:
    """A person's state as an export shows it: the latest view taken and, per funnel, the steps
    counted in each period and the chains in progress."""
    if not state:
        return {"latest_view": None, "progress": []}
    found = json.loads(state)
    return {
        "latest_view": found["t"],
        "progress": [
            {"funnel": int(funnel), "counted": own["p"], "in_progress": own["c"]}
            for funnel, own in sorted(found["f"].items(), key=lambda item: int(item[0]))
        ],
    }
