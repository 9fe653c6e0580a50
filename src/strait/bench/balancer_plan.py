"""Planning benchmark: time and peak memory to plan a rebalance of a generated cluster.

No cluster: the pure planner (`strait.balancer.operations.rebalance`) on generated models.
small = 100 brokers x 12 disks x 100,000 replicas; large = 1,000 brokers x 12 disks x 1,000,000.
Goals: `disks` plans without traffic (disk spread, racks, leader counts); `traffic` adds the
synthetic traffic of `strait.balancer.synthetic.traffic` (30% of partitions written, long tail,
skewed towards low broker ids), so the network-in and leader-bytes-in phases run too; `tiers`
also classes each broker's first two disks SSD and the rest HDD.

Wall time suffers on a shared machine; CPU time (process time) and the 1-minute load average are
reported too (a planning run is CPU-bound: wall figures only mean something when the load is
below the core count). Peak memory is the process's peak RSS (ru_maxrss), before and after
planning, so the planner's own share is the difference: run one case per process for a clean
figure. The clusters are skewed (a tenth of replicas piled onto the first brokers and first
disks) and 5% of brokers are new and empty.

Run: `strait bench planner [--size small|large|both] [--goals disks|traffic|tiers|all] [--seed N]`
(or `python -m strait.bench.balancer_plan` with the same options).
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from typing import Any

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
GOALS = ("disks", "traffic", "tiers")
CLASSES = {"/data/d0": "ssd", "/data/d1": "ssd", "*": "hdd"}


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(size: str, goals_name: str, seed: int = 7, shape: Shape | None = None) -> dict[str, Any]:
    """Generate the `size` cluster (or `shape`, under that name), plan it with `goals_name`, and
    return what was measured."""
    shape = shape or SIZES[size]
    t0 = time.perf_counter()
    model = generate(shape, seed)
    traffic = synthetic_traffic(model, seed) if goals_name in ("traffic", "tiers") else None
    classes = DiskClasses.of(CLASSES) if goals_name == "tiers" else None
    t1 = time.perf_counter()
    load = os.getloadavg()
    before = _peak_mb()
    cpu0 = time.process_time()
    plan = operations.rebalance(model, Goals(), traffic, classes)
    t2 = time.perf_counter()
    cpu = time.process_time() - cpu0
    after = _peak_mb()
    load_end = os.getloadavg()
    lead0 = leader_counts(model)
    lead1 = leader_counts(apply(model, plan.moves))
    return {
        "size": size,
        "goals": goals_name,
        "seed": seed,
        "brokers": shape.brokers,
        "dirs_per_broker": shape.dirs_per_broker,
        "replicas": model.replica_count(),
        "load_average_before": [round(x, 2) for x in load],
        "load_average_after": [round(x, 2) for x in load_end],
        "cpus": os.cpu_count(),
        "generate_s": round(t1 - t0, 3),
        "plan_wall_s": round(t2 - t1, 3),
        "plan_cpu_s": round(cpu, 3),
        "peak_rss_mb_before": round(before),
        "peak_rss_mb_after": round(after),
        "stats": plan.stats,
        "leaders_before": [min(lead0.values()), max(lead0.values())],
        "leaders_after": [min(lead1.values()), max(lead1.values())],
        "warnings": len(plan.warnings),
    }


def describe(r: dict[str, Any]) -> str:
    """One line for a result of `run`."""
    s = r["stats"]
    line = (
        f"{r['size']}/{r['goals']}: {r['brokers']} brokers x {r['dirs_per_broker']} disks x "
        f"{r['replicas']:,} replicas | load {r['load_average_before'][0]:.2f} -> {r['load_average_after'][0]:.2f} | "
        f"generate {r['generate_s']:.1f}s | plan {r['plan_wall_s']:.2f}s wall, {r['plan_cpu_s']:.2f}s CPU | "
        f"peak RSS {r['peak_rss_mb_before']} MB before planning, {r['peak_rss_mb_after']} MB after "
        f"(+{r['peak_rss_mb_after'] - r['peak_rss_mb_before']} MB) | moves {s['moves']:,} "
        f"(inter {s['inter_broker_moves']:,}, intra {s['intra_broker_moves']:,}) | "
        f"bytes {s['bytes'] / 2**40:.2f} TiB vs lower bound {s['min_bytes'] / 2**40:.2f} TiB "
        f"({s['bytes'] / max(s['min_bytes'], 1):.2f}x) | spread {s['spread_before']:.3f} -> {s['spread_after']:.3f} "
        f"| preferred leaders per broker {r['leaders_before'][0]}..{r['leaders_before'][1]} -> "
        f"{r['leaders_after'][0]}..{r['leaders_after'][1]}"
    )
    if "traffic_spread_before" in s:
        b, a = s["traffic_spread_before"], s["traffic_spread_after"]
        line += " | load spread MB/s " + ", ".join(
            f"{res} {b[res] / 1e6:.1f} -> {a[res] / 1e6:.1f}" for res in ("net_in", "net_out", "leader_in")
        )
    return f"{line} | warnings {r['warnings']}"


def cases(size: str, goals: str) -> list[tuple[str, str]]:
    """The (size, goals) pairs that `size` and `goals` name, `both` and `all` expanded."""
    sizes = ("small", "large") if size == "both" else (size,)
    kinds = GOALS if goals == "all" else (goals,)
    for name in (*sizes, *kinds):
        if name not in (*SIZES, *GOALS):
            raise ValueError(f"unknown size or goals {name!r}")
    return [(s, g) for s in sizes for g in kinds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=["small", "large", "both"], default="both")
    parser.add_argument("--goals", choices=[*GOALS, "all"], default="traffic")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    for size, goals_name in cases(args.size, args.goals):
        print(describe(run(size, goals_name, args.seed)), flush=True)


if __name__ == "__main__":
    main()
