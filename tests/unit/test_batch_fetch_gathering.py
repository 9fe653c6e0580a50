"""The batch pipeline's gathering fetches (PipelineSettings.fetch_gather_ms): while a leader's
answers bring records and the destination is busy with produce requests, its next fetch lets the
broker collect for as long as that lasts, up to the window; with the destination idle or the
leader idle it answers at the first record, and a pipeline without the setting never gathers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.future import Future

from strait.worker.batch import pipeline as batch_pipeline
from strait.worker.batch.gathering import GATHER_MIN_BYTES, DestinationClock, fetch_wait
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


def _copy(logs: dict[Key, list[bytes]], settings: PipelineSettings, *, slow: bool = False) -> AskedHow:
    """Copy ``logs`` to the end, then a few idle turns; the fetch requests the pipeline sent.
    ``slow``: the destination answers each produce request one loop turn late."""
    clock = Clock()
    batch_pipeline.time = clock  # type: ignore[attr-defined]  # restored by the autouse fixture
    src, dst = AskedHow(logs), FakeDestination()
    dst.hold = slow
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
        dst.release_held()
        pipeline._step()
        if all(s.checkpoint == src.end((s.task.topic, s.task.partition)) for s in states):
            break
    for _ in range(5):
        dst.release_held()
        pipeline._step()
    for key in logs:
        assert dst.payloads(key) == payloads(logs[key])
    return src


def test_a_leader_bringing_records_gathers_while_the_destination_is_busy() -> None:
    settings = PipelineSettings(fetch_wait_max_ms=100, fetch_gather_ms=5, fetch_max_bytes=300)
    src = _copy({("t", 0): source_log(8), ("t", 1): source_log(8)}, settings, slow=True)
    assert len(src.asked) >= 4, src.asked
    # Nothing brought yet: the first fetch long-polls.
    assert src.asked[0][:2] == (100, 1)
    gathered = 0
    for (wait, least, _), (_, _, before) in zip(src.asked[1:], src.asked, strict=False):
        if before:
            # The destination holds each request a turn: the window is its round trip, not 5 ms.
            assert least == GATHER_MIN_BYTES and 1 <= wait <= 5, src.asked
            gathered += 1
        else:
            assert (wait, least) == (100, 1), src.asked
    assert gathered, "the copy took more than one fetch"
    assert not src.asked[-1][2], "the log was copied to its end: the last answer is empty"
    assert src.asked[-1][:2] == (100, 1)


def test_without_the_setting_every_fetch_answers_at_the_first_record() -> None:
    src = _copy({("t", 0): source_log(8)}, PipelineSettings(fetch_max_bytes=300))
    assert {(wait, least) for wait, least, _ in src.asked} == {(100, 1)}


@given(
    wait_max_ms=st.integers(0, 1000),
    gather_max_ms=st.integers(0, 50),
    flowing=st.booleans(),
    busy_for_s=st.one_of(st.none(), st.floats(0, 1, allow_nan=False)),
)
def test_a_fetch_gathers_only_while_records_flow_and_the_destination_is_busy(
    wait_max_ms: int, gather_max_ms: int, flowing: bool, busy_for_s: float | None
) -> None:
    wait = fetch_wait(wait_max_ms=wait_max_ms, gather_max_ms=gather_max_ms, flowing=flowing, busy_for_s=busy_for_s)
    assert 0 <= wait.wait_ms <= wait_max_ms
    gathers = wait.min_bytes == GATHER_MIN_BYTES
    assert wait.min_bytes in (1, GATHER_MIN_BYTES)
    # Gathering needs all three: records flowing, a window, a destination not known to be idle.
    assert gathers == bool(wait_max_ms and gather_max_ms and flowing and (busy_for_s is None or busy_for_s > 0))
    if gathers:
        assert 1 <= wait.wait_ms <= gather_max_ms
        if busy_for_s is not None:
            # No longer than the destination is expected to stay busy (to the millisecond).
            assert wait.wait_ms <= max(1, busy_for_s * 1000 + 1)
    elif wait_max_ms:
        assert wait.wait_ms == wait_max_ms  # a long poll: the broker answers at the first record


@given(
    round_trips=st.lists(st.floats(0, 0.5, allow_nan=False), max_size=20),
    sent_ago=st.floats(0, 1, allow_nan=False),
)
def test_the_destination_is_busy_only_with_requests_in_flight(round_trips: list[float], sent_ago: float) -> None:
    clock = DestinationClock()
    for rtt in round_trips:
        clock.answered(rtt)
    assert 0 < clock.round_trip_s <= max([*round_trips, 0.002]) + 1e-9
    now = 100.0
    assert clock.busy_for(now, in_flight=False) == 0.0
    assert clock.busy_for(now, in_flight=True) == clock.round_trip_s, "a first request about to go out"
    clock.sent(now - sent_ago)
    assert clock.busy_for(now, in_flight=False) == 0.0
    busy = clock.busy_for(now, in_flight=True)
    assert 0 < busy <= clock.round_trip_s + 1e-9
    if sent_ago < clock.round_trip_s:
        assert busy == pytest.approx(clock.round_trip_s - sent_ago)
