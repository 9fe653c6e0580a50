"""Planning benchmark: time and peak memory to plan a rebalance of a generated cluster.

Run: python bench/balancer_plan.py [--size small|large|both] [--goals disks|traffic|tiers|all] [--seed N]
small = 100 brokers x 12 disks x 100,000 replicas; large = 1,000 brokers x 12 disks x 1,000,000.
Goals: `disks` plans without traffic (disk spread, racks, leader counts); `traffic` adds the
synthetic traffic of `strait.balancer.synthetic.traffic` (30% of partitions written, long tail,
skewed towards low broker ids), so the network-in and leader-bytes-in phases run too; `tiers`
also classes each broker's first two disks SSD and the rest HDD.

Wall time suffers on a shared machine; CPU time and the 1-minute load average are printed too
(a planning run is CPU-bound: wall figures only mean something when the load is below the core
count). Peak memory is the process's peak RSS (ru_maxrss), reported before and after planning,
so the planner's own share is the difference. The clusters are skewed (a tenth of replicas piled
onto the first brokers and first disks) and 5% of brokers are new and empty.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from strait.balancer import operations
from strait.balancer.goals import Goals, leader_counts
from strait.balancer.plan import apply
from strait.balancer.synthetic import Shape, generate
from strait.balancer.synthetic import traffic as synthetic_traffic
from strait.balancer.tiers import DiskClasses

SIZES = {
    "small": Shape(brokers=100, dirs_per_broker=12, partitions=100_000 // 3, skew=0.1, empty_brokers=5, fill=0.4),
    "large": Shape(brokers=1000, dirs_per_broker=12, partitions=1_000_000 // 3, skew=0.1, empty_brokers=50, fill=0.4),
}
CLASSES = {"/data/d0": "ssd", "/data/d1": "ssd", "*": "hdd"}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(name: str, goals_name: str, seed: int) -> None:
    shape = SIZES[name]
    t0 = time.perf_counter()
    model = generate(shape, seed)
    traffic = synthetic_traffic(model, seed) if goals_name in ("traffic", "tiers") else None
    classes = DiskClasses.of(CLASSES) if goals_name == "tiers" else None
    t1 = time.perf_counter()
    load = os.getloadavg()[0]
    before = _peak_mb()
    cpu0 = time.process_time()
    plan = operations.rebalance(model, Goals(), traffic, classes)
    t2 = time.perf_counter()
    cpu = time.process_time() - cpu0
    after = _peak_mb()
    load_end = os.getloadavg()[0]
    s = plan.stats
    lead0 = leader_counts(model)
    lead1 = leader_counts(apply(model, plan.moves))
    line = (
        f"{name}/{goals_name}: {shape.brokers} brokers x {shape.dirs_per_broker} disks x "
        f"{model.replica_count():,} replicas | load {load:.2f} -> {load_end:.2f} | "
        f"generate {t1 - t0:.1f}s | plan {t2 - t1:.1f}s wall, {cpu:.1f}s CPU | "
        f"peak RSS {before:.0f} MB before planning, "
        f"{after:.0f} MB after (+{after - before:.0f} MB) | moves {s['moves']:,} "
        f"(inter {s['inter_broker_moves']:,}, intra {s['intra_broker_moves']:,}) | "
        f"bytes {s['bytes'] / 2**40:.2f} TiB vs lower bound {s['min_bytes'] / 2**40:.2f} TiB "
        f"({s['bytes'] / max(s['min_bytes'], 1):.2f}x) | spread {s['spread_before']:.3f} -> {s['spread_after']:.3f} "
        f"| preferred leaders per broker {min(lead0.values())}..{max(lead0.values())} -> "
        f"{min(lead1.values())}..{max(lead1.values())}"
    )
    if traffic is not None:
        b, a = s["traffic_spread_before"], s["traffic_spread_after"]
        line += " | load spread MB/s " + ", ".join(
            f"{res} {b[res] / 1e6:.1f} -> {a[res] / 1e6:.1f}" for res in ("net_in", "net_out", "leader_in")
        )
    print(f"{line} | warnings {len(plan.warnings)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", choices=["small", "large", "both"], default="both")
    parser.add_argument("--goals", choices=["disks", "traffic", "tiers", "all"], default="traffic")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    for name in ("small", "large") if args.size == "both" else (args.size,):
        for goals_name in ("disks", "traffic", "tiers") if args.goals == "all" else (args.goals,):
            run(name, goals_name, args.seed)


if __name__ == "__main__":
    main()
