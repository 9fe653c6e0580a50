"""An exactly-once route in batch copy mode against real Kafka: a backlog of none, gzip, lz4 and
zstd batches drains through the transactional `batch` pipeline, new records through the
transactional `realtime-batch` one; a read_committed reader sees every source record exactly
once with its key, value, headers and timestamp, stored in the source's codec, and the
destination group's checkpoints at the source end, and the route's offset map (written inside
the same transactions) sends every source offset to exactly where its copy is. Fencing the
worker's transactional ids stops every partition, and the destination then holds exactly the
records its checkpoints cover."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strait.config import RouteConfig
from strait.demo import create_topic
from strait.fencing import fence, worker_transactional_ids
from strait.offsetmap.store import read_map
from strait.sandbox import Sandbox
from strait.worker.batch.records import Codec
from strait.worker.copier import BATCH, REALTIME_BATCH, Copier
from strait.worker.exactly_once import exactly_once_parts
from strait.worker.task import PartitionTask
from strait.worker.transactional_checkpoints import destination_group
from tests.integration.test_batch_pipeline import (
    committed,
    copied_through,
    modes_seen,
    payload,
    produce_mixed,
    read_all,
    stats_of,
    uid,
    wait_for,
)
from tests.integration.test_batch_transactions import stored_batches

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "lz4", "zstd"]
BACKLOG = 600
THRESHOLD = 100  # a backlog of BACKLOG starts in the batch pipeline
LIVE = 80  # fewer than THRESHOLD: the partitions stay in the realtime batch pipeline
WORKER = "w1"


@pytest.fixture
def make_copier(sandbox: Sandbox) -> Iterator[Callable[[str], Copier]]:
    made: list[Copier] = []

    def make(route: str) -> Copier:
        src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
        config = RouteConfig(
            name=route,
            source="src",
            destination="dst",
            delivery="exactly-once",
            realtime_copy="batch",
            catchup_lag_threshold=THRESHOLD,
            transaction_max_bytes=128 * 1024,  # the backlog spans several transactions
        )
        copier = Copier(
            route=route,
            source=src,
            destination=dst,
            group_id=f"strait-{route}",
            worker_id=WORKER,
            commit_interval_s=0.5,
            catchup_lag_threshold=THRESHOLD,
            copy="batch",
            realtime_copy="batch",
            **exactly_once_parts(config, source=src, destination=dst, worker_id=WORKER, batches=True),
        )
        copier.start()
        made.append(copier)
        return copier

    yield make
    for copier in made:
        copier.stop(drain=False, timeout_s=5)


def _pair(src: dict[str, Any], dst: dict[str, Any], route: str, codec: str) -> PartitionTask:
    """A source topic with a backlog of ``codec`` batches and its empty destination topic."""
    source, destination = f"eob-src-{codec}-{uid()}", f"eob-dst-{codec}-{uid()}"
    create_topic(src, source, 1)
    create_topic(dst, destination, 1, {"compression.type": "producer"})
    produce_mixed(src, source, BACKLOG, codec, seed=len(codec))
    return PartitionTask(route, source, 0, destination)


def test_an_exactly_once_route_copies_whole_batches_once(
    sandbox: Sandbox, make_copier: Callable[[str], Copier]
) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    route = f"eob-{uid()}"
    group = destination_group(route)
    tasks = [_pair(src, dst, route, codec) for codec in CODECS]
    copier = make_copier(route)
    with modes_seen(copier, tasks[0]) as seen:
        copier.assign(tasks)
        for task in tasks:
            wait_for(lambda t=task: copied_through(copier, t, BACKLOG), f"{task} backlog copied")
        # Caught up: the partitions move to the realtime batch pipeline, and new records follow.
        for task in tasks:
            wait_for(
                lambda t=task: (s := stats_of(copier, t)) is not None and s.pipeline == REALTIME_BATCH,
                f"{task} in the realtime batch pipeline",
            )
        for task, codec in zip(tasks, CODECS, strict=True):
            produce_mixed(src, task.topic, LIVE, codec, seed=7)
        for task in tasks:
            wait_for(lambda t=task: copied_through(copier, t, BACKLOG + LIVE), f"{task} new records copied")
    assert list(dict.fromkeys(pipeline for pipeline, _, _ in seen)) == [BATCH, REALTIME_BATCH], seen
    assert all(mode == "batch" for _, mode, _ in seen)
    for task, codec in zip(tasks, CODECS, strict=True):
        s = stats_of(copier, task)
        assert s is not None and s.mode == "batch" and s.state == "ok", (codec, s)
        source_rows, copied_rows = read_all(src, task.topic), read_all(dst, task.destination_topic)
        # Each record once, in order, with its key, value, headers and timestamp.
        assert len(source_rows) == BACKLOG + LIVE
        assert payload(copied_rows) == payload(source_rows), codec
        assert committed(dst, group, task.destination_topic) == BACKLOG + LIVE, codec
        # Whole batches, in the source's codec, inside transactions.
        data = [b for b in stored_batches(dst, task.destination_topic, 0) if not b.is_control]
        assert {b.codec for b in data} == {Codec[codec.upper()]} and all(b.is_transactional for b in data), codec
        # The offset map: each source offset to the offset of its copy, and nothing else.
        entry = read_map(dst, route)[(task.topic, 0)]
        assert entry.destination_topic == task.destination_topic
        mapped = {run.source + i: run.destination + i for run in entry.runs for i in range(run.count)}
        assert mapped == {s[4]: c[4] for s, c in zip(source_rows, copied_rows, strict=True)}, codec

    # Fenced as the controller fences a dead worker: every partition stops, and what the
    # destination holds is exactly what its committed checkpoints cover.
    fence(dst, worker_transactional_ids([route], WORKER), timeout_s=30)
    for task, codec in zip(tasks, CODECS, strict=True):
        produce_mixed(src, task.topic, 50, codec, seed=11)
    wait_for(lambda: copier.fenced() == set(tasks), "every partition fenced")
    for task in tasks:
        checkpoint = committed(dst, group, task.destination_topic)
        assert checkpoint >= BACKLOG + LIVE
        assert payload(read_all(dst, task.destination_topic)) == payload(read_all(src, task.topic)[:checkpoint])
