"""The sweep's registry: every family of keys (pattern, type, lifetime), declared by its builder in
``store.keys`` with ``@family``, and what a key found by SCAN belongs to."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from activity import conf
from activity.store.lifetimes import LONGEST_DAYS, Lifetime

_PLACEHOLDER = re.compile(r"<(\w+)>")


@dataclass(frozen=True, slots=True)
class Family:
    """One kind of key. ``pattern`` is the key after the prefix, ``<name>`` standing for the
    builder's parameter ``name``; ``redis_type`` is what TYPE answers for it."""

    pattern: str
    redis_type: str
    lifetime: Lifetime
    builder: Callable[..., str] | None
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = _PLACEHOLDER.split(self.pattern)  # literal, name, literal, name, ..., literal
        source = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>.+)" for i, part in enumerate(parts))
        object.__setattr__(self, "regex", re.compile(source))
        if self.lifetime.kind == "dated" and not any(f"<{p}>" in self.pattern for p in LONGEST_DAYS):
            raise ValueError(f"{self.pattern}: a dated family needs <day>, <week> or <month> in its pattern")


FAMILIES: list[Family] = []

Builder = TypeVar("Builder", bound=Callable[..., str])


def family(pattern: str, redis_type: str, lifetime: Lifetime) -> Callable[[Builder], Builder]:
    """Declare the family of the keys the decorated builder makes."""

    def register(builder: Builder) -> Builder:
        FAMILIES.append(Family(pattern, redis_type, lifetime, builder))
        return builder

    return register


def prefix() -> str:
    return conf.settings.KEY_PREFIX


def match_pattern(key: str) -> str:
    """SCAN MATCH pattern of ``key``, a key a builder made with ``*`` for what varies: the glob
    characters of the prefix escaped, so a prefix holding one matches only itself."""
    escaped = "".join(f"\\{char}" if char in "*?[]\\" else char for char in prefix())
    return escaped + key.removeprefix(prefix())


def sweep_pattern() -> str:
    """SCAN MATCH pattern for every key under the prefix."""
    return match_pattern(f"{prefix()}*")


def family_of(key: str) -> tuple[Family, dict[str, str]] | None:
    """The family ``key`` belongs to and the values of its pattern's placeholders; None when it is
    not under the prefix or matches no family."""
    own = prefix()
    if not key.startswith(own):
        return None
    rest = key[len(own) :]
    for candidate in FAMILIES:
        match = candidate.regex.fullmatch(rest)
        if match:
            return candidate, match.groupdict()
    return None


def stray_ttl(key: str, now: float, default: int) -> int | None:
    """TTL in seconds the sweep gives ``key`` found without one (0: delete); None: leave it alone.
    A key of ours that matches no family gets ``default``."""
    found = family_of(key)
    if found is None:
        return default
    declared, fields = found
    return declared.lifetime.stray_ttl(fields, now)
