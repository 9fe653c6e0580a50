"""The exactly-once batch pipeline against real Kafka: a backlog of none, gzip, lz4 and zstd
batches copied inside transactions, seen once by read_committed consumers with the destination
group's checkpoints at the source end; a second pipeline with the same transactional id fences
the first, which writes nothing after."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from strait.demo import create_topic
from strait.sandbox import Sandbox
from strait.worker.batch.records import Codec
from strait.worker.batch.transactional import TransactionalBatchPipeline
from strait.worker.pipeline import PartitionState
from strait.worker.task import PartitionTask
from strait.worker.transactional_checkpoints import destination_group
from tests.integration.test_batch_pipeline import committed, payload, produce_mixed, read_all, uid
from tests.integration.test_batch_transactions import stored_batches

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "lz4", "zstd"]
RECORDS = 400
TIMEOUT_S = 45.0


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def pipelines(sandbox: Sandbox) -> Iterator[Callable[[str, str], TransactionalBatchPipeline]]:
    made: list[TransactionalBatchPipeline] = []

    def make(name: str, transactional_id: str) -> TransactionalBatchPipeline:
        pipeline = TransactionalBatchPipeline(
            name=name,
            source=sandbox.clusters["src"].props(),
            destination=sandbox.clusters["dst"].props(),
            client_id=f"txb-{uid()}",
            transactional_id=transactional_id,
            checkpoint_group=destination_group(ROUTE),
            call_timeout_s=20.0,
            transaction_max_bytes=256 * 1024,  # several transactions in the backlog
        )
        pipeline.start()
        made.append(pipeline)
        return pipeline

    yield make
    for pipeline in made:
        pipeline.stop(5.0)


ROUTE = f"txb-{uid()}"


def pair(sandbox: Sandbox, codec: str) -> PartitionTask:
    """A source topic with a backlog of ``codec`` batches and its empty destination topic."""
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    source, destination = f"txb-src-{codec}-{uid()}", f"txb-dst-{codec}-{uid()}"
    create_topic(src, source, 1)
    create_topic(dst, destination, 1, {"compression.type": "producer"})
    produce_mixed(src, source, RECORDS, codec, seed=len(codec))
    return PartitionTask(ROUTE, source, 0, destination)


def test_backlog_copied_once_and_a_second_instance_fences_the_first(
    sandbox: Sandbox, pipelines: Callable[[str, str], TransactionalBatchPipeline]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    group = destination_group(ROUTE)
    transactional_id = f"txb-{uid()}"
    tasks = [pair(sandbox, codec) for codec in CODECS]
    first = pipelines("first", transactional_id)
    started = time.monotonic()
    states = [PartitionState(task) for task in tasks]
    for state in states:
        first.add(state, 0)
    wait_for(lambda: all(s.checkpoint == RECORDS for s in states), "the backlog copied")
    copy_s = time.monotonic() - started
    for state, codec in zip(states, CODECS, strict=True):
        task = state.task
        assert state.error is None and state.mode == "batch", codec
        assert payload(read_all(dst, task.destination_topic)) == payload(read_all(src, task.topic)), codec
        assert committed(dst, group, task.destination_topic) == RECORDS, codec
        data = [b for b in stored_batches(dst, task.destination_topic, 0) if not b.is_control]
        assert {b.codec for b in data} == {Codec[codec.upper()]} and all(b.is_transactional for b in data)
    assert first.transactions >= 3 and first.aborts == 0

    # A second instance takes the transactional id (another partition): the first is fenced at
    # its next transaction and writes nothing after.
    extra = pair(sandbox, "lz4")
    second = pipelines("second", transactional_id)
    newcomer = PartitionState(extra)
    second.add(newcomer, 0)
    wait_for(lambda: newcomer.checkpoint == RECORDS, "the second instance copying")
    fenced = states[0]
    produce_mixed(src, fenced.task.topic, 50, "none", seed=9)
    wait_for(lambda: fenced.error is not None, "the first instance fenced")
    assert fenced.error is not None and fenced.error.startswith("fenced:"), fenced.error
    assert all(s.error is not None and s.error.startswith("fenced:") for s in states)
    time.sleep(1.0)
    rows = read_all(dst, fenced.task.destination_topic)
    assert payload(rows) == payload(read_all(src, fenced.task.topic)[:RECORDS])  # nothing after the fence
    assert committed(dst, group, fenced.task.destination_topic) == RECORDS
    assert all(s.checkpoint == RECORDS for s in states)
    assert payload(read_all(dst, extra.destination_topic)) == payload(read_all(src, extra.topic))
    assert committed(dst, group, extra.destination_topic) == RECORDS
    print(f"backlog of {len(CODECS)} x {RECORDS} records copied in {copy_s:.1f}s, {first.transactions} transactions")
