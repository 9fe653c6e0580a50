"""`strait bench` reads each replicator's committed position from real clusters and splits missing records.

No replicator runs here: the test writes what one would have left behind (a copy with gaps, and
a committed position: Strait's checkpoint group, or a MirrorMaker 2 Connect offsets topic), then
the benchmark's own audit reads the clusters and says which missing records are lost and which
are not yet copied. `tests/integration/test_bench_smoke.py` checks the positions real
replicators commit.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from strait import clients
from strait.bench import positions, workload
from strait.bench.mirrormaker import MirrorMaker2, render_properties
from strait.bench.records import Stamp, encode
from strait.bench.straitrun import StraitReplicator
from strait.bench.verifier import Verifier
from strait.demo import wait_until
from strait.sandbox import Sandbox

pytestmark = pytest.mark.integration

RECORDS = 10
COPIED = (0, 1, 2, 3, 6)  # what the copy holds when it is read again
SEEN = (0, 1, 2, 3)  # what the reader had seen when the window closed (6 arrived later)


def _produce(props: Mapping[str, Any], topic: str, seqs: tuple[int, ...]) -> None:
    producer = clients.producer(props)
    for seq in seqs:
        producer.produce(topic, value=encode(0, seq, 0, 64), partition=0)
    assert producer.flush(30) == 0


def _commit(props: Mapping[str, Any], group: str, topic: str, offset: int) -> None:
    consumer = clients.consumer(props, **{"group.id": group, "enable.auto.commit": False})
    try:
        # A fresh sandbox may still be loading its offsets topic: retry until the coordinator is ready.
        assert wait_until(
            lambda: bool(consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)), 60
        ), f"could not commit {offset} for {group}"
    finally:
        consumer.close()


@pytest.fixture
def topic(sandbox: Sandbox) -> Iterator[str]:
    """A source topic with records 0..9 at offsets 0..9, and its copy holding `COPIED`."""
    name = f"positions-{uuid.uuid4().hex[:6]}"
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    workload.create_topics(src, [name], 1)
    workload.create_topics(dst, [name], 1)
    _produce(src, name, tuple(range(RECORDS)))
    _produce(dst, name, COPIED)
    yield name


def _verifier(topic: str) -> Verifier:
    verifier = Verifier({(topic, 0): RECORDS})
    for seq in SEEN:
        verifier.observe(topic, 0, Stamp(0, seq, 0))
    return verifier


def test_strait_records_behind_its_checkpoint_are_lost(sandbox: Sandbox, topic: str, tmp_path: Path) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    # At-least-once: the checkpoint (next offset to copy) is 5 in the source group strait-bench.
    _commit(src, "strait-bench", topic, 5)
    strait = StraitReplicator(zookeeper=sandbox.zookeeper, src_props=src, dst_props=dst, workdir=tmp_path, workers=1)
    try:
        _check_strait(strait, topic, src, dst)
    finally:
        strait.stop()  # started nothing: closes its API client


def _check_strait(strait: StraitReplicator, topic: str, src: dict[str, str], dst: dict[str, str]) -> None:
    logged: list[str] = []
    report = positions.audit(strait, _verifier(topic), src, dst, log=logged.append)
    # Missing at the window's close: 4..9. Behind the checkpoint: 4 -> lost. 5..9: not yet copied.
    assert (report.missing, report.lost, report.not_yet_copied) == (6, 1, 5), logged
    assert report.partitions[0].lost_ranges == ((4, 4),) and report.partitions[0].committed == 5

    # Exactly-once: the destination group strait.bench is the source of truth and takes precedence.
    _commit(dst, "strait.bench", topic, 7)
    report = positions.audit(strait, _verifier(topic), src, dst, log=logged.append)
    # Behind 7: 4, 5 and 6; 6 reached the copy after the reader stopped, so only 4 and 5 are lost.
    assert (report.missing, report.lost, report.not_yet_copied) == (6, 2, 4), logged
    assert report.partitions[0].committed == 7


def test_mirrormaker_records_behind_its_connect_offsets_are_lost(sandbox: Sandbox, topic: str, tmp_path: Path) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    run_id = f"bench-{uuid.uuid4().hex[:8]}"
    # What a MirrorMaker run leaves in its work folder, and in its offsets topic on the target.
    (tmp_path / "mm2-node-1.properties").write_text(
        render_properties(
            src_bootstrap=src["bootstrap.servers"],
            dst_bootstrap=dst["bootstrap.servers"],
            topics_pattern=topic,
            tasks=1,
            run_id=run_id,
        )
    )
    (tmp_path / "mm2-node-1.log").write_text("")
    offsets_topic = f"mm2-offsets.{run_id}.internal"
    workload.create_topics(dst, [offsets_topic], 1)
    producer = clients.producer(dst)
    for offset in (2, 6):  # two commits: the last copied record was at offset 2, then at 6
        key = json.dumps(["MirrorSourceConnector", {"cluster": "src", "partition": 0, "topic": topic}])
        producer.produce(offsets_topic, key=key.encode(), value=json.dumps({"offset": offset}).encode(), partition=0)
    assert producer.flush(30) == 0

    mm2 = MirrorMaker2(src_bootstrap="", dst_bootstrap="", workdir=tmp_path, tasks=1)
    assert positions.committed_positions(mm2, src, dst, [(topic, 0)]) == {(topic, 0): 7}
    logged: list[str] = []
    report = positions.audit(mm2, _verifier(topic), src, dst, log=logged.append)
    assert (report.missing, report.lost, report.not_yet_copied) == (6, 2, 4), logged
    assert report.partitions[0].lost_ranges == ((4, 5),)


def test_without_any_commit_nothing_is_lost(sandbox: Sandbox, topic: str, tmp_path: Path) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    mm2 = MirrorMaker2(src_bootstrap="", dst_bootstrap="", workdir=tmp_path / "never-started", tasks=1)
    report = positions.audit(mm2, _verifier(topic), src, dst)
    assert (report.missing, report.lost, report.not_yet_copied) == (6, 0, 6)
