"""The batch pipeline's gathering fetches (PipelineSettings.fetch_gather_ms): while a leader's
answers bring records, its next fetch lets the broker collect for a short window; an idle
leader is long-polled, and a pipeline without the setting never gathers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.future import Future

from strait.worker.batch import pipeline as batch_pipeline
from strait.worker.batch.fetching import GATHER_MIN_BYTES
from strait.worker.batch.link import Key
from strait.worker.batch.pipeline import BatchPipeline
from strait.worker.pipeline import PipelineSettings
from tests.unit.test_batch_pipeline import Clock, FakeDestination, FakeLinks, FakeSource, payloads, source_log, start


@pytest.fixture(autouse=True)
def real_time_afterwards() -> Iterator[None]:
    yield
    batch_pipeline.time = time  # type: ignore[attr-defined]


class AskedHow(FakeSource):
    """Each fetch request's (max_wait_ms, min_bytes) and whether its answer brought records."""

    def __init__(self, logs: dict[Key, list[bytes]]) -> None:
        super().__init__(logs)
        self.asked: list[tuple[int, int, bool]] = []

    def fetch(self, node: int, offsets: dict[Key, int], **options: Any) -> Future:
        answer = super().fetch(node, offsets, **options)
        brought = any(p.records for t in answer.value.responses for p in t.partitions)
        self.asked.append((options["max_wait_ms"], options.get("min_bytes", 1), brought))
        return answer


def _copy(logs: dict[Key, list[bytes]], settings: PipelineSettings) -> AskedHow:
    """Copy ``logs`` to the end, then a few idle turns; the fetch requests the pipeline sent."""
    clock = Clock()
    batch_pipeline.time = clock  # type: ignore[attr-defined]  # restored by the autouse fixture
    src, dst = AskedHow(logs), FakeDestination()
    pipeline = BatchPipeline(
        name="realtime-batch",
        source={},
        destination={},
        group_id="g",
        client_id="c",
        settings=settings,
        links=FakeLinks(src, dst, clock),  # type: ignore[arg-type]
        merge_bytes=0,  # batches one by one: payloads() compares them as the source has them
    )
    states = [start(pipeline, t, p) for t, p in logs]
    for _ in range(200):
        pipeline._step()
        if all(s.checkpoint == src.end((s.task.topic, s.task.partition)) for s in states):
            break
    for _ in range(5):
        pipeline._step()
    for key in logs:
        assert dst.payloads(key) == payloads(logs[key])
    return src


def test_a_leader_bringing_records_is_asked_to_gather_and_an_idle_one_is_long_polled() -> None:
    settings = PipelineSettings(fetch_wait_max_ms=100, fetch_gather_ms=5, fetch_max_bytes=300)
    src = _copy({("t", 0): source_log(8), ("t", 1): source_log(8)}, settings)
    assert len(src.asked) >= 4, src.asked
    # Nothing brought yet: the first fetch long-polls.
    assert src.asked[0][:2] == (100, 1)
    for (wait, least, _), (_, _, before) in zip(src.asked[1:], src.asked, strict=False):
        if before:
            assert (wait, least) == (5, GATHER_MIN_BYTES), src.asked
        else:
            assert (wait, least) == (100, 1), src.asked
    assert any(brought for *_, brought in src.asked[:-1]), "the copy took more than one fetch"
    assert not src.asked[-1][2], "the log was copied to its end: the last answer is empty"
    assert src.asked[-1][:2] == (100, 1)


def test_without_the_setting_every_fetch_answers_at_the_first_record() -> None:
    src = _copy({("t", 0): source_log(8)}, PipelineSettings(fetch_max_bytes=300))
    assert {(wait, least) for wait, least, _ in src.asked} == {(100, 1)}
