"""Storage tiers: log dirs classed `ssd` or `hdd`, hot replicas kept on SSD (Meituan's idea,
outside the broker).

Classes come from rules keyed like capacity rules (`strait.balancer.capacity`): `*`, a dir glob,
a broker id or `broker:path`, most specific first; `--disk-class KEY=ssd` on the command line
over `balance.disk_classes.<cluster>` in the configuration file. A dir no rule names has no
class and takes no part.

On each broker with both classes, the replicas with the highest recent traffic (write plus read
bytes/s, from `strait.balancer.traffic`) are kept on its SSD dirs, hottest first, as long as they
fit in the SSD budget (the SSD dirs' capacity times the capacity limit); every other replica on
an SSD dir (cold, or hot but not fitting) goes to the HDD dir with the lowest usage. Only
intra-broker moves are made, so racks and broker traffic are untouched; each move keeps the
capacity limit, and a replica that cannot move stays (with a warning).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strait.balancer.capacity import parse_key
from strait.balancer.planner import Workspace, name
from strait.balancer.traffic import Traffic

CLASSES = ("ssd", "hdd")


@dataclass(frozen=True, slots=True)
class ClassRule:
    broker: int | None
    pattern: str
    disk_class: str
    key: str

    @property
    def specificity(self) -> tuple[bool, bool, bool]:
        return (self.broker is not None, not (set("*?[") & set(self.pattern)), self.pattern != "*")

    def matches(self, broker: int, path: str) -> bool:
        import fnmatch

        if self.broker is not None and self.broker != broker:
            return False
        return self.pattern == "*" or fnmatch.fnmatchcase(path, self.pattern)


def parse_class(value: object) -> str:
    text = str(value).strip().lower()
    if text not in CLASSES:
        raise ValueError(f"disk class {value!r} must be one of {', '.join(CLASSES)}")
    return text


def class_rules(classes: Mapping[Any, Any]) -> tuple[ClassRule, ...]:
    """Rules from a {key: class} mapping, in order; ValueError naming the first bad entry."""
    rules = []
    for key, value in classes.items():
        broker, pattern = parse_key(key)
        try:
            rules.append(ClassRule(broker, pattern, parse_class(value), str(key)))
        except ValueError as exc:
            raise ValueError(f"disk class {key!r}: {exc}") from None
    return tuple(rules)


@dataclass(frozen=True)
class DiskClasses:
    """Layers of class rules; the first layer with a matching rule decides a dir's class."""

    layers: tuple[tuple[ClassRule, ...], ...] = ()

    @classmethod
    def of(cls, value: DiskClasses | Mapping[Any, Any] | None) -> DiskClasses:
        if isinstance(value, DiskClasses):
            return value
        return cls((class_rules(value),)) if value else cls()

    def over(self, lower: DiskClasses | Mapping[Any, Any] | None) -> DiskClasses:
        return DiskClasses(self.layers + DiskClasses.of(lower).layers)

    def __bool__(self) -> bool:
        return any(self.layers)

    def class_of(self, broker: int, path: str) -> str | None:
        for layer in self.layers:
            best: ClassRule | None = None
            for rule in layer:
                if rule.matches(broker, path) and (best is None or rule.specificity > best.specificity):
                    best = rule
            if best is not None:
                return best.disk_class
        return None


def place_tiers(ws: Workspace, traffic: Traffic | None, classes: DiskClasses, warnings: list[str]) -> None:
    """Keep each broker's hottest replicas on its SSD dirs and move the rest to its HDD dirs."""
    if not classes:
        return
    heat = [0.0] * len(ws.keys)
    if traffic is not None:
        for pidx, key in enumerate(ws.keys):
            r = traffic.rate(key)
            heat[pidx] = r.bytes_in + r.bytes_read
    on_disk: dict[int, list[tuple[int, int]]] = {}  # disk -> (partition, slot)
    for pidx, disks in enumerate(ws.disks):
        for slot, d in enumerate(disks):
            if d >= 0:
                on_disk.setdefault(d, []).append((pidx, slot))
    for broker, disks in ws.broker_disks.items():
        if broker in ws.excluded:
            continue
        ssd = [d for d in disks if ws.usable(d) and classes.class_of(broker, ws.disk_path[d]) == "ssd"]
        hdd = [d for d in disks if ws.usable(d) and classes.class_of(broker, ws.disk_path[d]) == "hdd"]
        if ssd and hdd:
            _broker(ws, broker, ssd, hdd, heat, on_disk, warnings)


def _broker(
    ws: Workspace,
    broker: int,
    ssd: list[int],
    hdd: list[int],
    heat: list[float],
    on_disk: dict[int, list[tuple[int, int]]],
    warnings: list[str],
) -> None:
    here = [pidx for d in ssd + hdd for pidx, _ in on_disk.get(d, ())]
    # Hottest first; between equals the smaller first (more of them fit), then by name.
    here.sort(key=lambda p: (-heat[p], ws.size[p], ws.keys[p]))
    budget = sum(ws.disk_limit[d] for d in ssd)
    hot: set[int] = set()
    for pidx in here:
        if heat[pidx] <= 0:
            break
        if ws.size[pidx] <= budget:
            hot.add(pidx)
            budget -= ws.size[pidx]
    ssd_set = set(ssd)

    def where(pidx: int) -> int:
        return ws.disks[pidx][ws.replicas[pidx].index(broker)]

    # Cold replicas leave first, to make room for the hot ones.
    for pidx in sorted((p for p in here if p not in hot and where(p) in ssd_set), key=lambda p: -ws.size[p]):
        target = min((d for d in hdd if ws.can_host(pidx, broker, d)), key=lambda d: (ws.ratio(d), d), default=None)
        if target is None:
            warnings.append(
                f"tiers: {name(ws, pidx)} stays on SSD dir {ws.disk_path[where(pidx)]} of broker {broker}: "
                "no HDD dir has room for it under the capacity limit"
            )
            continue
        ws.move(pidx, broker, target)
    for pidx in sorted((p for p in hot if where(p) not in ssd_set), key=lambda p: (-heat[p], ws.keys[p])):
        target = min(
            (d for d in ssd if ws.can_host(pidx, broker, d)),
            key=lambda d: (ws.disk_used[d] - ws.disk_limit[d], d),
            default=None,
        )
        if target is None:
            warnings.append(
                f"tiers: hot {name(ws, pidx)} stays on HDD dir {ws.disk_path[where(pidx)]} of broker {broker}: "
                "no SSD dir has room for it under the capacity limit"
            )
            continue
        ws.move(pidx, broker, target)
