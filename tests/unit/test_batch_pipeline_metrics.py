"""The batch pipeline's metrics count records, as record mode's do: one observation per batch
standing for its records (produce_ack, queued, end-to-end latency)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from strait.metrics.stages import RouteObserver
from strait.worker.batch import pipeline as batch_pipeline
from strait.worker.batch.pipeline import BatchPipeline
from tests.unit.test_batch_pipeline import Clock, FakeDestination, FakeLinks, FakeSource, run, source_log, start


@pytest.fixture(autouse=True)
def real_time_afterwards() -> Iterator[None]:
    import time

    yield
    batch_pipeline.time = time  # type: ignore[attr-defined]


def test_stage_and_latency_counts_add_up_to_records() -> None:
    logs = {("t", 0): source_log(5), ("t", 1): source_log(3)}  # 4 records per batch
    src, dst, clock = FakeSource(logs), FakeDestination(), Clock()
    batch_pipeline.time = clock  # type: ignore[attr-defined]
    observer = RouteObserver("r")
    pipeline = BatchPipeline(
        name="batch",
        source={},
        destination={},
        group_id="g",
        client_id="c",
        observer=observer,
        links=FakeLinks(src, dst, clock),  # type: ignore[arg-type]
    )
    states = [start(pipeline, "t", p) for p in (0, 1)]
    run(pipeline, lambda: all(s.checkpoint == src.end(("t", s.task.partition)) for s in states))
    stages = observer.stages()
    assert sum(c.count for (_, stage, _), c in stages.items() if stage == "produce_ack") == 32
    assert sum(c.count for (_, stage, _), c in stages.items() if stage == "queued") == 32
    assert observer.end_to_end()["t"].count == 32
