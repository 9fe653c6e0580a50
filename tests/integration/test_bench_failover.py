"""`strait bench failover` at CI size, Strait only (MirrorMaker's JVM start and its group sync
take minutes on two cores: that comparison is the on-demand `strait bench failover`).

A small topic is copied by a real controller and worker; a group consumes part of each partition
on the source; the controller's group sync (the route's `groups`) writes its translated offsets to
the destination, `strait failover` must find the same, and the group resumes on the destination:
it must read nothing again and skip nothing, in every partition.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from strait.bench import scenarios
from strait.bench.scenarios import Bench
from strait.sandbox import Sandbox

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_a_group_failed_over_by_strait_re_reads_and_skips_nothing(sandbox: Sandbox, tmp_path: Path) -> None:
    bench = Bench(sandbox=sandbox, workdir=tmp_path / "runs", systems=["strait"], log=lambda _m: None)

    result = scenarios.failover(bench, records=3000, partitions=3, commit_every=100)

    (run,) = result["runs"]
    assert "error" not in run, f"{run['error']} (logs: {run['logs']})"
    assert run["untranslated_partitions"] == 0
    assert run["consumed_on_source"] > 0
    for p, row in run["per_partition"].items():
        # The first record read on the destination is the one after the last committed on the source.
        assert row["first_seq"] == row["source_committed"], (p, row)
        assert row["re_read"] == 0 and row["skipped"] == 0, (p, row)
    assert (run["re_read"], run["skipped"]) == (0, 0)
    # The offsets came from the controller's continuous group sync (the route's `groups`), and the
    # one-shot failover run after it found exactly the same.
    assert run["translation"]["partitions_with_offsets"] == 3
    assert run["failover_equals_sync"] is True
    assert all(row["synced"] == row["destination_committed"] for row in run["per_partition"].values())
    # The offset map's cost, read back from its topic: every partition mapped, at most a few
    # runs each (a backlog copied without faults), a record per publish.
    cost = run["offset_map"]
    assert cost["partitions"] == 3 and 3 <= cost["runs"] <= cost["map_records"], cost
    assert 0 < cost["bytes"] < cost["copied_bytes"] and cost["bytes_per_gb_copied"] > 0, cost
