"""The CI-sized run of the harness: each system copies a small topic, the verifier counts 0 lost."""

from __future__ import annotations

import time
import uuid
from typing import Any

from strait.bench import positions, reader, workload
from strait.bench.replicator import Replicator
from strait.bench.scenarios.harness import (
    Bench,
    run_safely,
    running,
    topic_name,
    verdict,
)


def smoke(
    bench: Bench, *, records: int = 5000, partitions: int = 4, size: int = 100, timeout_s: float = 120
) -> dict[str, Any]:
    """Each system copies a small pre-filled topic; the verifier must count 0 lost."""
    runs = []
    for system in bench.order(0):
        run_dir = bench.run_dir(topic_name("smoke", system))
        topic = topic_name("smoke", uuid.uuid4().hex[:6], system)
        workload.create_topics(bench.src, [topic], partitions)
        expected = workload.prefill(bench.src, topic, partitions, records, size)
        replicator = bench.replicator(system, run_dir, parallelism=1)
        result: dict[str, Any] = {"system": system, "records": records, "logs": str(run_dir)}

        def body(
            replicator: Replicator = replicator,
            result: dict[str, Any] = result,
            topic: str = topic,
            expected: workload.Counts = expected,
        ) -> None:
            started = time.monotonic()
            with running(replicator, [topic]):
                arrivals = reader.read(bench.dst, [topic], done=lambda n: n >= records, deadline_s=timeout_s)
            result["seconds"] = round(time.monotonic() - started, 2)
            result["verify"] = verdict(bench, replicator, arrivals, expected)
            # What the replicator committed (its resume position, summed over partitions): after a
            # clean stop, every record; this is the figure a missing record is judged lost against.
            keys = [(topic, p) for p in range(partitions)]
            committed = positions.committed_positions(
                replicator, bench.src, bench.dst, keys, offsets_props=bench.sandbox.clusters["dst"].admin_props()
            )
            result["committed"] = sum(position or 0 for position in committed.values())

        runs.append(run_safely(result, body))
        bench.log(f"smoke: {system}: {runs[-1].get('verify')} {runs[-1].get('error', '')}")
    return {"scenario": "smoke", "params": {"records": records, "partitions": partitions, "size": size}, "runs": runs}
