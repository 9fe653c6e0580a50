"""Where each replicator's committed progress stands, and the reads that split missing records.

After a run, the records the reader did not see are split into lost and not yet copied
(`strait.bench.missing`) by the replicator's committed position on each source partition:

- **Strait**: the route's checkpoint. An exactly-once route commits it to the destination group
  ``strait.<route>`` (the source of truth); an at-least-once route, or a partition that group
  holds nothing for, to the source group ``strait-<route>``.
- **MirrorMaker 2**: the source offset its Connect worker committed for the partition, in the
  run's offsets topic (``offset.storage.topic`` of the rendered ``mm2.properties``, on the
  target cluster): key ``["MirrorSourceConnector", {"cluster", "topic", "partition"}]``, value
  ``{"offset": n}``, n being the last record copied; the task resumes at n + 1.

Every consumer here is assigned partitions by hand and never commits, so reading moves no
position and joins no group.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from strait import clients
from strait.bench.missing import Key, split
from strait.bench.records import decode
from strait.bench.verifier import Verifier, VerifyReport

STRAIT_ROUTE = "bench"  # the route every benchmarked Strait runs (`strait.bench.straitrun`)
_READER = {"group.id": "strait-bench-positions", "enable.auto.commit": False, "log_level": 0}
_NOT_READY = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
        KafkaError._TIMED_OUT,
        KafkaError._WAIT_COORD,
    }
)
_OFFSETS_TOPIC = re.compile(r"^\s*offset\.storage\.topic\s*=\s*(\S+)\s*$", re.MULTILINE)


def audit(
    replicator: object,
    verifier: Verifier,
    src: Mapping[str, Any],
    dst: Mapping[str, Any],
    *,
    log: Callable[[str], None] = lambda _m: None,
    timeout_s: float = 120.0,
    offsets_props: Mapping[str, Any] | None = None,
) -> VerifyReport:
    """The verifier's verdict with its missing records split into lost and not yet copied.

    `offsets_props` reads MirrorMaker's offsets topic on the target (default `dst`; on secured
    clusters MirrorMaker runs as a user of its own). When the committed positions cannot be
    read the missing records stay unsplit (lost None), rather than being called lost or harmless.
    """
    missing = verifier.missing()
    if not missing:
        return verifier.report(split={})
    keys = sorted(missing)
    try:
        committed = committed_positions(replicator, src, dst, keys, offsets_props=offsets_props)
        splits = split(
            missing,
            committed,
            behind=lambda key, position: _stamps(src, key, stop=position, timeout_s=timeout_s),
            present=lambda key, seqs: {s for _o, s in _stamps(dst, key, timeout_s=timeout_s) if s in seqs},
        )
    except Exception as exc:  # a verdict without the split beats no verdict
        log(f"  (could not split {sum(map(len, missing.values()))} missing records into lost / not yet copied: {exc})")
        return verifier.report()
    return verifier.report(splits)


def committed_positions(
    replicator: object,
    src: Mapping[str, Any],
    dst: Mapping[str, Any],
    keys: Iterable[Key],
    *,
    offsets_props: Mapping[str, Any] | None = None,
) -> dict[Key, int | None]:
    """The next source offset `replicator` would copy after a restart, per partition (None: none committed)."""
    from strait.bench.mirrormaker import MirrorMaker2
    from strait.bench.straitrun import StraitReplicator

    wanted = list(keys)
    if isinstance(replicator, StraitReplicator):
        return strait_positions(src, dst, wanted)
    if isinstance(replicator, MirrorMaker2):
        topic = mirrormaker_offsets_topic(replicator.logs())
        if topic is None:
            return dict.fromkeys(wanted)  # it never wrote a configuration: it never started
        # Dedicated mode keeps Connect's internal topics on the target cluster.
        return mirrormaker_positions(dst if offsets_props is None else offsets_props, topic, wanted)
    raise TypeError(f"no committed position known for {type(replicator).__name__}")


def strait_positions(
    src: Mapping[str, Any], dst: Mapping[str, Any], keys: list[Key], route: str = STRAIT_ROUTE
) -> dict[Key, int | None]:
    from strait.worker.agent import checkpoint_group
    from strait.worker.transactional_checkpoints import destination_group

    in_destination = _committed(dst, destination_group(route), keys)
    in_source = _committed(src, checkpoint_group(route), keys)
    return {k: in_destination[k] if in_destination.get(k) is not None else in_source.get(k) for k in keys}


def mirrormaker_offsets_topic(logs: list[Path]) -> str | None:
    """The offsets topic named in the ``mm2-node-*.properties`` beside a MirrorMaker run's logs."""
    folders = {log.parent for log in logs}
    for properties in sorted(p for folder in folders for p in folder.glob("mm2-node-*.properties")):
        match = _OFFSETS_TOPIC.search(properties.read_text())
        if match:
            return match.group(1)
    return None


def mirrormaker_positions(props: Mapping[str, Any], topic: str, keys: list[Key]) -> dict[Key, int | None]:
    """Connect's committed source offsets from its offsets topic, as resume positions."""
    latest = parse_connect_offsets(_records(props, topic))
    out: dict[Key, int | None] = {}
    for key in keys:
        offset = latest.get(key)
        out[key] = None if offset is None else offset + 1
    return out


def parse_connect_offsets(records: Iterable[tuple[bytes | None, bytes | None]]) -> dict[Key, int | None]:
    """(topic, partition) -> the last source offset MirrorSourceConnector committed (None after a
    tombstone), from the offsets topic's (key, value) records in order. Other keys are skipped."""
    out: dict[Key, int | None] = {}
    for key, value in records:
        try:
            name, partition = json.loads(key or b"null")
            if "MirrorSource" not in str(name) or not isinstance(partition, dict):
                continue
            where = (str(partition["topic"]), int(partition["partition"]))
            out[where] = None if value is None else int(json.loads(value)["offset"])
        except (ValueError, TypeError, KeyError):
            continue
    return out


def _committed(props: Mapping[str, Any], group: str, keys: list[Key], timeout_s: float = 60.0) -> dict[Key, int | None]:
    consumer = clients.consumer(props, **{**_READER, "group.id": group})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                found = consumer.committed([TopicPartition(t, p) for t, p in keys], timeout=30)
                break
            except KafkaException as exc:  # a coordinator still loading its offsets: ask again
                error = exc.args[0]
                if not (error.retriable() or error.code() in _NOT_READY) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): (tp.offset if tp.offset >= 0 and tp.error is None else None) for tp in found}


def _records(
    props: Mapping[str, Any], topic: str, timeout_s: float = 60.0
) -> Iterator[tuple[bytes | None, bytes | None]]:
    """Every (key, value) of `topic`, partition by partition, in offset order."""
    metadata = clients.admin(props, log_level=0).list_topics(topic, timeout=30).topics.get(topic)
    if metadata is None or metadata.error is not None:
        raise RuntimeError(f"offsets topic {topic} not found")
    for partition in sorted(metadata.partitions):
        for message in _scan(props, (topic, partition), stop=None, timeout_s=timeout_s):
            yield message.key(), message.value()


def _stamps(
    props: Mapping[str, Any], key: Key, *, stop: int | None = None, timeout_s: float
) -> Iterator[tuple[int, int]]:
    """(offset, sequence number) of the benchmark records of one partition (below `stop`)."""
    partition = key[1]
    for message in _scan(props, key, stop=stop, timeout_s=timeout_s):
        stamp = decode(message.value())
        offset = message.offset()
        if stamp is not None and stamp.partition == partition and offset is not None:
            yield offset, stamp.seq


def _scan(props: Mapping[str, Any], key: Key, *, stop: int | None, timeout_s: float) -> Iterator[Any]:
    """The messages of one partition from its start to `stop` (or its end), read_committed.

    Raises when the end is not reached in `timeout_s`: a partial read would turn records that
    are there into lost ones.
    """
    topic, partition = key
    consumer = clients.consumer(props, **{**_READER, "isolation.level": "read_committed"})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
        stop = end if stop is None else min(stop, end)
        if stop <= 0:
            return
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while True:
            messages = consumer.consume(num_messages=5000, timeout=0.5)
            for message in messages:
                offset = message.offset()
                if message.error() is not None or offset is None:
                    continue
                if offset >= stop:
                    return
                yield message
                if offset + 1 >= stop:
                    return
            if not messages:
                # Transaction markers at the end move the position, not the messages.
                [position] = consumer.position([TopicPartition(topic, partition)])
                if position.offset >= stop:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}/{partition} did not reach offset {stop} in {timeout_s:.0f}s")
    finally:
        consumer.close()
