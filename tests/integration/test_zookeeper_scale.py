"""ZooKeeper holds Strait at scale: 25,000 partitions (the old single node's limit) through a real
controller and simulated workers; the 100,000 run is `strait bench zookeeper`."""

from __future__ import annotations

import pytest

from strait.bench import zk_scale
from strait.sandbox import Sandbox

pytestmark = pytest.mark.integration


def test_25k_partitions_publish_read_and_move_with_every_node_small(sandbox: Sandbox) -> None:
    result = zk_scale.run(sandbox.zookeeper, partitions=25_000, workers=3, topics=50, log=lambda _line: None)
    print(result)  # the figures, for whoever reads the test log
    assert result["partitions"] == 25_000
    # The previous layout (one map) would not fit into a node; every node now is far below it.
    assert result["layout1_assignment_bytes"] > zk_scale.ZNODE_LIMIT
    assert result["under_limit"] and result["max_znode_bytes"] < zk_scale.ZNODE_LIMIT / 8
    # Per-partition stats are not in ZooKeeper, yet the controller sees all of them (over HTTP).
    assert result["znodes_after_first"]["workers_stats"]["max_bytes"] < 4_000
    assert result["stats_gathered_partitions"] == 25_000
    assert result["held_seen_by_controller"] == 25_000
    # A dead worker's partitions all went to the two left.
    assert result["assigned_after_death"] == 25_000
    assert result["znodes_after_death"]["assignment"]["nodes"] >= 2
