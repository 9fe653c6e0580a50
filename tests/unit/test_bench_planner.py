"""The planner benchmark's harness on a small generated cluster: it plans, measures and reports."""

from __future__ import annotations

import pytest

from strait.balancer.synthetic import Shape
from strait.bench import balancer_plan

TINY = Shape(brokers=12, dirs_per_broker=3, partitions=600, skew=0.1, empty_brokers=1, fill=0.4)


@pytest.mark.parametrize("goals", balancer_plan.GOALS)
def test_the_harness_plans_a_small_cluster_and_reports_time_memory_and_leaders(goals: str) -> None:
    result = balancer_plan.run("tiny", goals, seed=3, shape=TINY)
    assert result["replicas"] == 1800
    assert result["plan_cpu_s"] >= 0 and result["plan_wall_s"] >= 0
    assert result["peak_rss_mb_after"] >= result["peak_rss_mb_before"] > 0
    assert result["stats"]["moves"] > 0
    lo, hi = result["leaders_after"]
    assert 0 <= lo <= hi
    line = balancer_plan.describe(result)
    assert line.startswith(f"tiny/{goals}: 12 brokers x 3 disks x 1,800 replicas")
    assert ("load spread MB/s" in line) == (goals != "disks")


def test_sizes_and_goals_expand_and_unknown_ones_are_refused() -> None:
    assert balancer_plan.cases("both", "traffic") == [("small", "traffic"), ("large", "traffic")]
    assert balancer_plan.cases("small", "all") == [("small", g) for g in balancer_plan.GOALS]
    with pytest.raises(ValueError, match="huge"):
        balancer_plan.cases("huge", "traffic")
