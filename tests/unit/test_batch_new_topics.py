"""The batch pipeline's start of a new topic's partitions: configs read once per topic."""

from __future__ import annotations

import threading

import pytest

from strait.worker.batch import pipeline as batch_pipeline
from strait.worker.batch.compat import DestinationTopic
from tests.unit.test_batch_pipeline import (  # noqa: F401  # the autouse fixture restores the clock
    FakeDestination,
    FakeSource,
    real_time_afterwards,
    run,
    setup,
    source_log,
    start,
)


def test_a_topics_partitions_started_together_read_its_configs_once_and_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def compacted(self: FakeSource, topic: str) -> bool:
        asked.append(f"src:{topic}")
        return False

    def destination_topic(self: FakeDestination, topic: str) -> DestinationTopic:
        asked.append(f"dst:{topic}")
        return DestinationTopic()

    monkeypatch.setattr(FakeSource, "compacted", compacted)
    monkeypatch.setattr(FakeDestination, "destination_topic", destination_topic)
    logs = {("t", 0): source_log(2), ("t", 1): source_log(2), ("u", 0): source_log(2)}
    pipeline, src, _ = setup(logs)
    states = [start(pipeline, "t", 0), start(pipeline, "t", 1), start(pipeline, "u", 0)]
    run(pipeline, lambda: all(s.checkpoint == src.end((s.task.topic, s.task.partition)) for s in states))
    assert sorted(asked) == ["dst:t", "dst:u", "src:t", "src:u"]
    pipeline._release(states[1], threading.Event())
    later = batch_pipeline.time.monotonic() + batch_pipeline.TOPIC_CONFIGS_REUSE_S + 1  # type: ignore[attr-defined]
    batch_pipeline.time.now = later  # type: ignore[attr-defined]
    again = start(pipeline, "t", 1, offset=src.end(("t", 1)))
    run(pipeline, lambda: again.fetching)
    assert sorted(asked) == ["dst:t", "dst:t", "dst:u", "src:t", "src:t", "src:u"]
