"""The chaos benchmark's short run, on every change: `strait bench chaos` for a few minutes.

The same runner as the command (`strait.bench.chaos.run`), on a module sandbox of two 3-broker
clusters (replication factor 3, min.insync.replicas 2), with a fixed seed whose schedule holds
every kind of fault of the store, under the CPU hog. Required: not one acknowledged record lost
or left behind, nothing out of order, and every kind of fault really injected. The exactly-once
run copies in batch mode.

The fleet coordinates on the destination cluster (the Kafka store, Strait's default), whose
faults kill or freeze the broker leading a coordination topic; the sandbox starts no ZooKeeper.
`STRAIT_CHAOS_STORE=zookeeper` runs the same test with the fleet coordinating on a sandbox
ZooKeeper (killed and restarted by the schedule).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from strait.bench.chaos import ChaosOptions, run
from strait.bench.chaos.schedule import STORE_KINDS
from strait.sandbox import Sandbox, SandboxSpec

pytestmark = pytest.mark.integration

STORE = "zookeeper" if os.environ.get("STRAIT_CHAOS_STORE", "kafka") == "zookeeper" else "kafka"
KINDS = STORE_KINDS[STORE]
# Each seed's schedule grows a source topic before it first kills a source broker: a broker
# killed with -9 may need minutes to serve again on a starved machine, and no topic can grow
# meanwhile. Seed 25 on the Kafka store also freezes the coordinating broker before it first
# kills one: a frozen broker is back at once, a killed one only after its restart.
SEED = int(os.environ.get("STRAIT_CHAOS_SEED", "25" if STORE == "kafka" else "1"))
DURATION_S = 150.0


@pytest.fixture(scope="module")
def clusters(sandbox_factory: Callable[[SandboxSpec], Sandbox]) -> Sandbox:
    spec = SandboxSpec(
        clusters=("src", "dst"), brokers=3, log_dirs=1, startup_timeout_s=240, zookeeper=STORE == "zookeeper"
    )
    return sandbox_factory(spec)


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_short_chaos_run_loses_nothing(
    clusters: Sandbox, tmp_path: Path, delivery: str, record_property: Callable[[str, object], None]
) -> None:
    options = ChaosOptions(
        duration_s=DURATION_S,
        seed=SEED,
        delivery="exactly-once" if delivery == "exactly-once" else "at-least-once",
        catchup_timeout_s=240,
        store=STORE,
        # Exactly-once in batch mode (no offset map): backlogs after faults go through the
        # transactional batch pipeline, caught-up partitions through the transactional record one.
        copy="batch" if delivery == "exactly-once" else None,
    )
    result = run(options, workdir=tmp_path, sandbox=clusters)
    (tmp_path / "chaos.json").write_text(json.dumps(result, indent=1))  # kept with the logs for post-mortems
    totals, injected = result["totals"], result["faults_injected"]
    print(
        f"\nCHAOS {delivery} on {STORE} seed {SEED}: produced={totals['produced']} checked={totals['checked']} "
        f"lost={totals['lost']} not_yet_copied={totals['not_yet_copied']} duplicates={totals['duplicates']} "
        f"out_of_order={totals['out_of_order']} faults={injected} load_average={result['load_average'].get('mean')}"
        f" exited_by_themselves={result['unexpected_exits']}"
    )
    for key in ("produced", "lost", "not_yet_copied", "duplicates", "out_of_order"):
        record_property(f"chaos_{delivery}_{key}", totals[key])
    problems = [p for p in result["partitions"] if p.get("missing_runs") or p["out_of_order"]]
    assert totals["lost"] == 0, problems
    assert totals["not_yet_copied"] == 0, (result["catch_up"], problems)
    assert totals["out_of_order"] == 0 and totals["misrouted"] == 0, problems
    if delivery == "exactly-once":
        assert totals["duplicates"] == 0, [p for p in result["partitions"] if p["duplicates"]]
    assert result["ok"], result["failures"]
    # The run proves something only if the load and the faults really happened.
    assert totals["produced"] > 50_000 and all(row["produced"] > 0 for row in result["per_topic"].values())
    assert set(result["schedule"]["planned"]) == set(KINDS)
    missed = sorted(kind for kind in KINDS if injected.get(kind, 0) < 1)
    assert not missed, (f"never injected: {missed}", result["faults_skipped"], result["fault_errors"])
    assert sum(injected.values()) >= 15, injected
