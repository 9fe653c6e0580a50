"""The assignment benchmark's harness on a small fleet: it runs, checks, and counts moves right."""

from __future__ import annotations

from strait.bench.assignment import generate, run
from strait.coordination.model import PartitionKey
from strait.metrics.healing import steer


def test_the_harness_measures_deaths_and_joins_on_a_small_fleet() -> None:
    result = run(partitions=3000, workers=30, pools=3, repeats=2, log=lambda _m: None)
    assert result["violations"] == 0
    assert sum(result["partitions_per_route"].values()) == 3000
    for row in result["runs"]:
        # The dead worker's own, plus (pinned partitions lifting its pool) at most as many others.
        assert row["death_moved"] == row["dead_owned"] + row["death_moved_others"]
        assert row["death_moved_others"] <= row["dead_pinned"]
        assert row["join_moved"] == row["new_worker_owns"]
        assert abs(row["new_worker_owns"] - row["pool_fair_share"]) <= 1
        assert row["death_assign_s"] > 0 and row["join_assign_s"] > 0


def test_the_generated_fleet_has_pinned_and_shared_routes() -> None:
    fleet = generate(1000, 10, 5, pinned_share=0.5)
    assert fleet.route_pools["shared"] is None
    assert fleet.route_pools["only-pool1"] == frozenset({"pool1"})
    assert sorted(set(fleet.workers.values())) == [f"pool{p}" for p in range(5)]
    assert len(fleet.partitions) == 1000


def test_healing_moves_a_stuck_partition_only_within_its_pools() -> None:
    key = PartitionKey("gold", "t", 0)
    pools = {"v1": "vip", "v2": "vip", "d1": "default"}
    desired, _, _ = steer(
        {key: "v1"},
        {key: "v1"},
        {"v1": frozenset({key})},
        {key: frozenset({"v1"})},
        sorted(pools),
        allowed=lambda k, w: pools[w] == "vip",
    )
    assert desired == {key: "v2"}
    # No other worker of its pool: it stays (moving it out of its pools is not healing).
    desired, _, _ = steer(
        {key: "v1"},
        {key: "v1"},
        {},
        {key: frozenset({"v1", "v2"})},
        sorted(pools),
        allowed=lambda k, w: pools[w] == "vip",
    )
    assert desired == {key: "v1"}
