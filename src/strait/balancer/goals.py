"""What a balanced cluster means, and how far a model is from it.

Usage is measured per disk as used/capacity. The goal is that the spread (largest minus smallest
ratio over every disk of every broker the plan may use; within each storage tier when dirs are
classed SSD/HDD) is within `threshold`, no disk goes past
`capacity_limit`, no partition has two replicas under one rack switch, and preferred leaders are
spread evenly over brokers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from strait.balancer.model import ClusterModel, LogDir

# A dir's storage tier from its broker and path (`DiskClasses.class_of`), or None for no class.
ClassOf = Callable[[int, str], str | None]


@dataclass(frozen=True, kw_only=True)
class Goals:
    """Tunable targets for one plan.

    threshold: allowed max-min spread of disk usage ratios (0.10 = ten percentage points).
    capacity_limit: a move may not take a disk past this fraction of its capacity.
    leaders: also even out preferred leaders (reorders replica lists; copies no data).
    max_candidates: how many of the emptiest disks are tried as destinations per step; bounds
        planning time on large clusters.
    traffic_threshold: with traffic measured, the allowed max-min spread of each broker load
        (net in, net out, leader bytes in) as a fraction of its mean (`strait.balancer.loads`).
    """

    threshold: float = 0.10
    capacity_limit: float = 0.90
    leaders: bool = True
    max_candidates: int = 24
    traffic_threshold: float = 0.10

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be within [0, 1], got {self.threshold}")
        if not 0.0 < self.capacity_limit <= 1.0:
            raise ValueError(f"capacity_limit must be within (0, 1], got {self.capacity_limit}")
        if self.traffic_threshold < 0:
            raise ValueError(f"traffic_threshold must be at least 0, got {self.traffic_threshold}")
        if self.max_candidates < 1:
            raise ValueError(f"max_candidates must be at least 1, got {self.max_candidates}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def eligible_dirs(model: ClusterModel, excluded_brokers: Collection[int] = ()) -> list[LogDir]:
    """Disks that count for balance: every disk of every broker not being drained."""
    return [d for d in model.all_dirs() if d.broker not in excluded_brokers and d.capacity > 0]


def spread(dirs: Iterable[LogDir], class_of: ClassOf | None = None) -> float:
    """Largest minus smallest usage ratio; zero for no disks.

    With `class_of` (a dir's storage tier, `strait.balancer.tiers`), the spread is taken within
    each tier and the largest one counts: tiers hold different data on purpose (hot replicas on
    SSD, the rest on HDD), so an SSD emptier than the HDDs beside it is the goal, not a skew.
    Dirs without a class form a tier of their own.
    """
    if class_of is None:
        ratios = [d.ratio for d in dirs]
        return max(ratios) - min(ratios) if ratios else 0.0
    return max((spread(group) for group in by_class(dirs, class_of).values()), default=0.0)


def by_class(dirs: Iterable[LogDir], class_of: ClassOf) -> dict[str | None, list[LogDir]]:
    """`dirs` grouped by storage tier."""
    groups: dict[str | None, list[LogDir]] = {}
    for d in dirs:
        groups.setdefault(class_of(d.broker, d.path), []).append(d)
    return groups


def mean_ratio(dirs: Iterable[LogDir]) -> float:
    """The usage every disk would have if data were spread perfectly (capacity-weighted)."""
    used = capacity = 0
    for d in dirs:
        used += d.used
        capacity += d.capacity
    return used / capacity if capacity else 0.0


def min_bytes_to_move(model: ClusterModel, goals: Goals, excluded_brokers: Collection[int] = ()) -> int:
    """A lower bound on the bytes any plan must copy to meet the spread goal.

    After balancing, the fullest disk is within `threshold` of the emptiest, and the emptiest is at
    most the mean, so no disk may stay above mean + threshold; whatever sits above that has to
    leave. Data on drained brokers has to leave entirely.
    """
    dirs = eligible_dirs(model, excluded_brokers)
    capacity = sum(d.capacity for d in dirs)
    # Drained data must land on the remaining disks, so it raises their mean.
    mean = sum(d.used for d in model.all_dirs()) / capacity if capacity else 0.0
    bound = sum(max(0, d.used - int((mean + goals.threshold) * d.capacity)) for d in dirs)
    bound += sum(d.used for d in model.all_dirs() if d.broker in excluded_brokers)
    return bound


def leader_counts(model: ClusterModel) -> dict[int, int]:
    """Preferred leaders (first replica) per broker, every broker listed."""
    counts = dict.fromkeys(model.brokers, 0)
    for p in model.partitions.values():
        if p.replicas:
            counts[p.replicas[0]] = counts.get(p.replicas[0], 0) + 1
    return counts
