"""Disk capacities given by people, and refusing to balance when the brokers cannot size their disks.

A capacity rule has a key and a size. Keys, the same on the command line (`--capacity KEY=SIZE`)
and in the configuration file (`balance.capacities.<cluster>`):

    *             every dir of every broker
    /data/ssd*    dirs matching a glob (fnmatch), on any broker
    3             every dir of broker 3 (also `3:*`)
    3:/data/d1    dir /data/d1 of broker 3 (the path may be a glob too)

For one dir the most specific matching rule wins: a rule naming the broker beats one that does
not, then a literal path beats a glob, then a glob beats `*`; between equally specific rules the
one listed first wins. Rules come in layers (command line over configuration file): the first
layer with any matching rule decides. A dir no rule matches is sized by what the broker reports
(DescribeLogDirs v4+ total bytes).

Sizes are bytes, or text with a unit (`100GB`, `1.5TiB`, see `strait.balancer.units`).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from strait.balancer.errors import CapacityError
from strait.balancer.model import ClusterModel, LogDir
from strait.balancer.units import human, parse_bytes

_GLOB = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class Rule:
    """One capacity rule: `pattern` (fnmatch) on `broker` (None: any broker) is `size` bytes."""

    broker: int | None
    pattern: str
    size: int
    key: str

    @property
    def specificity(self) -> tuple[bool, bool, bool]:
        return (self.broker is not None, not (_GLOB & set(self.pattern)), self.pattern != "*")

    def matches(self, broker: int, path: str) -> bool:
        if self.broker is not None and self.broker != broker:
            return False
        return self.pattern == "*" or fnmatch.fnmatchcase(path, self.pattern)


def parse_key(key: object) -> tuple[int | None, str]:
    """(broker or None, path glob) of a rule key; ValueError naming the key if it is malformed."""
    text = str(key).strip()
    if not text:
        raise ValueError("empty capacity key (use '*' for every dir)")
    head, sep, tail = text.partition(":")
    if head.isdigit():
        if not sep:
            return int(head), "*"
        if not tail:
            raise ValueError(f"capacity key {text!r}: no path after the broker id (use '{head}:*')")
        return int(head), _pattern(text, tail)
    return None, _pattern(text, text)


def _pattern(key: str, pattern: str) -> str:
    if pattern == "*" or pattern.startswith("/") or (pattern[:1] in _GLOB):
        return pattern
    raise ValueError(
        f"capacity key {key!r}: expected '*', a log dir path or glob starting with '/', a broker id, "
        "or BROKER:PATH (e.g. '3:/data/d1')"
    )


def parse_size(value: object) -> int:
    """Bytes in an int or a text with unit; ValueError if not a positive amount."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a byte amount")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"{value} must be more than zero bytes")
        return value
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    if isinstance(value, str):
        return parse_bytes(value)
    raise ValueError(f"{value!r} is not a byte amount (examples: 100GB, 2TiB, 1000000)")


def rules_of(sizes: Mapping[Any, Any]) -> tuple[Rule, ...]:
    """Rules from a {key: size} mapping, in its order; ValueError naming the first bad entry."""
    rules: list[Rule] = []
    seen: dict[tuple[int | None, str], str] = {}
    for key, value in sizes.items():
        broker, pattern = parse_key(key)
        if (broker, pattern) in seen:
            raise ValueError(f"capacity key {key!r} says the same as {seen[(broker, pattern)]!r}")
        seen[(broker, pattern)] = str(key)
        try:
            size = parse_size(value)
        except ValueError as exc:
            raise ValueError(f"capacity {key!r}: {exc}") from None
        rules.append(Rule(broker, pattern, size, str(key)))
    return tuple(rules)


@dataclass(frozen=True)
class Capacities:
    """Layers of rules, the first layer that matches a dir deciding its size."""

    layers: tuple[tuple[Rule, ...], ...] = ()

    @classmethod
    def of(cls, value: Capacities | Mapping[Any, Any] | None) -> Capacities:
        if isinstance(value, Capacities):
            return value
        return cls((rules_of(value),)) if value else cls()

    def over(self, lower: Capacities | Mapping[Any, Any] | None) -> Capacities:
        """These rules first, `lower`'s where none of these matches (command line over config file)."""
        return Capacities(self.layers + Capacities.of(lower).layers)

    def __bool__(self) -> bool:
        return any(self.layers)

    def rule_for(self, broker: int, path: str) -> Rule | None:
        for layer in self.layers:
            best: Rule | None = None
            for rule in layer:
                if rule.matches(broker, path) and (best is None or rule.specificity > best.specificity):
                    best = rule
            if best is not None:
                return best
        return None

    def size_for(self, broker: int, path: str) -> int | None:
        rule = self.rule_for(broker, path)
        return None if rule is None else rule.size


# ---- a filesystem shared by several dirs ---------------------------------------------------------


def same_filesystem(a: LogDir, b: LogDir) -> bool:
    """Whether two dirs report one filesystem: equal total bytes, and free bytes equal but for the
    writes that may land between the broker's two readings (0.01% of the total, at least 1 MiB)."""
    if a.total <= 0 or a.total != b.total or a.free < 0 or b.free < 0:
        return False
    return abs(a.free - b.free) <= max(a.total // 10_000, 1 << 20)


def shared_filesystems(model: ClusterModel, excluded: Collection[int] = ()) -> dict[int, list[LogDir]]:
    """Per broker, its dirs sized by the broker that report one filesystem (see `same_filesystem`).

    Their usage ratios are each dir's bytes over the whole filesystem: tiny and equal-looking, so a
    plan would find them balanced whatever they hold. Dirs with a configured capacity do not count.
    Drained brokers (`excluded`) do not count either: their data leaves whatever their disks are.
    """
    found: dict[int, list[LogDir]] = {}
    for broker, dirs in model.log_dirs.items():
        if broker in excluded:
            continue
        sized = sorted((d for d in dirs if not d.configured), key=lambda d: (d.total, d.free))
        shared = {d.path: d for x, y in pairwise(sized) if same_filesystem(x, y) for d in (x, y)}
        if shared:
            found[broker] = sorted(shared.values(), key=lambda d: d.path)
    return found


def require_capacities(model: ClusterModel, excluded: Collection[int] = ()) -> None:
    """Refuse (CapacityError) to balance by usage ratio where dirs of one broker share a filesystem."""
    shared = shared_filesystems(model, excluded)
    if not shared:
        return
    parts = []
    for broker, dirs in sorted(shared.items()):
        sample = dirs[0]
        parts.append(
            f"broker {broker}: {', '.join(d.path for d in dirs)} "
            f"(total {human(sample.total)}, free {human(sample.free)})"
        )
    broker, dirs = min(shared.items())
    raise CapacityError(
        "cannot balance by disk usage: these log dirs report the same filesystem (same total and free "
        f"bytes), so their usage ratios say nothing: {'; '.join(parts)}. Give their capacities with "
        f"--capacity (e.g. '*=100GB' or '{broker}:{dirs[0].path}=100GB') or under balance.capacities "
        "in the configuration file"
    )
