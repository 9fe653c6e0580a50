"""The transactional session for raw batches against real Kafka: source batches of every codec
written unchanged inside transactions with the group offsets, aborts invisible to
read_committed consumers, and a second session with the same transactional id fencing the first.

Offsets are committed as exactly-once checkpoints are (``transactional_checkpoints``): keyed by
the destination topic and partition (the destination refuses offsets of topics it does not
have), holding the source offset."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from strait.demo import create_topic
from strait.sandbox import Sandbox
from strait.worker.batch.answers import fetched_partitions
from strait.worker.batch.link import ClusterLink
from strait.worker.batch.records import Codec, RecordBatch, split_batches
from strait.worker.batch.transactions import ProducerFenced
from strait.worker.batch.txnsession import TransactionalSession
from tests.integration.test_batch_pipeline import committed, payload, produce_mixed, raw_records, read_all, uid

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "lz4", "zstd"]
RECORDS = 400  # per source topic: several batches each
TIMEOUT_S = 60.0


def source_batches(props: dict[str, Any], codec: str) -> tuple[str, list[RecordBatch]]:
    """A new one-partition source topic holding ``RECORDS`` records compressed with ``codec``, and
    its record batches as the broker stores them."""
    topic = f"tx-src-{codec}-{uid()}"
    create_topic(props, topic, 1)
    produce_mixed(props, topic, RECORDS, codec, seed=len(codec))
    split = split_batches(raw_records(props, topic, 32 * 1024 * 1024))
    batches = [b for b in split.batches if not b.is_control]
    assert batches and batches[-1].next_offset == RECORDS, "the whole partition in one fetch"
    return topic, batches


@pytest.fixture
def dst_link(sandbox: Sandbox) -> Iterator[ClusterLink]:
    from kafka.net.selector import NetworkSelector

    net = NetworkSelector(client_id="tx-test")
    link = ClusterLink(sandbox.clusters["dst"].props(), net=net, client_id="tx-test", request_timeout_ms=30_000)
    yield link
    link.close()
    net.close()


def session(link: ClusterLink, transactional_id: str) -> TransactionalSession:
    s = TransactionalSession(link, transactional_id, transaction_timeout_ms=30_000, request_timeout_s=15)
    s.init(timeout_s=TIMEOUT_S)
    return s


def stored_batches(props: dict[str, Any], topic: str, partition: int) -> list[RecordBatch]:
    """The batches of a destination partition as stored (the commit and abort markers included)."""
    from strait.worker.batch.link import Links

    links = Links(props, props, client_id=f"tx-read-{uid()}")
    try:
        key = (topic, partition)
        leader = links.source.leaders(topic)[partition]
        future = links.source.fetch(
            leader, {key: 0}, partition_max_bytes={key: 32 << 20}, max_bytes=32 << 20, max_wait_ms=100
        )
        while not future.is_done:
            links.poll(0.1)
        return list(split_batches(fetched_partitions(future.value)[key].records).batches)
    finally:
        links.close()


def test_committed_transactions_carry_batches_unchanged_with_offsets(sandbox: Sandbox, dst_link: ClusterLink) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    sources = [source_batches(src, codec) for codec in CODECS]
    topic = f"tx-dst-{uid()}"
    create_topic(dst, topic, len(CODECS), {"compression.type": "producer"})
    group = f"tx-g-{uid()}"
    s = session(dst_link, f"tx-{uid()}")

    # Two transactions: each source's first batches, then the rest (sequences go on in the epoch).
    for half in (0, 1):
        s.begin()
        offsets = {}
        for partition, (_, batches) in enumerate(sources):
            cut = len(batches) // 2
            part = batches[:cut] if half == 0 else batches[cut:]
            for batch in part:
                s.write((topic, partition), batch)
            offsets[(topic, partition)] = part[-1].next_offset
        s.send_offsets(group, offsets)
        s.commit(timeout_s=TIMEOUT_S)
    assert s.model.transactions == 2

    for partition, (source, _) in enumerate(sources):
        assert payload(read_all(dst, topic, partition)) == payload(read_all(src, source)), CODECS[partition]
        assert committed(dst, group, topic, partition) == RECORDS
        data = [b for b in stored_batches(dst, topic, partition) if not b.is_control]
        assert {b.codec for b in data} == {Codec[CODECS[partition].upper()]}
        assert all(b.is_transactional and b.producer_id == s.producer.producer_id for b in data)  # type: ignore[union-attr]


def test_aborted_transaction_is_invisible(sandbox: Sandbox, dst_link: ClusterLink) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    source, batches = source_batches(src, "lz4")
    topic = f"tx-dst-{uid()}"
    create_topic(dst, topic, 1, {"compression.type": "producer"})
    group = f"tx-g-{uid()}"
    s = session(dst_link, f"tx-{uid()}")
    first = s.producer

    s.begin()
    for batch in batches:
        s.write((topic, 0), batch)
    s.send_offsets(group, {(topic, 0): RECORDS})
    s.flush(timeout_s=TIMEOUT_S)
    s.abort(timeout_s=TIMEOUT_S)
    assert s.producer is not None and first is not None and s.producer.epoch > first.epoch  # a new epoch after an abort

    cut = len(batches) // 2
    s.begin()
    for batch in batches[:cut]:
        s.write((topic, 0), batch)
    s.send_offsets(group, {(topic, 0): batches[cut - 1].next_offset})
    s.commit(timeout_s=TIMEOUT_S)

    expected = [row for row in read_all(src, source) if row[4] < batches[cut - 1].next_offset]
    assert payload(read_all(dst, topic)) == payload(expected)
    assert committed(dst, group, topic) == batches[cut - 1].next_offset


def test_a_second_session_fences_the_first(sandbox: Sandbox, dst_link: ClusterLink) -> None:
    src, dst = sandbox.clusters["src"].props(), sandbox.clusters["dst"].props()
    source, batches = source_batches(src, "zstd")
    topic = f"tx-dst-{uid()}"
    create_topic(dst, topic, 2, {"compression.type": "producer"})
    group = f"tx-g-{uid()}"
    transactional_id = f"tx-{uid()}"

    # A zombie whose next Produce is refused: its partition was added before it was fenced.
    zombie = session(dst_link, transactional_id)
    zombie.begin()
    zombie.write((topic, 0), batches[0])
    zombie.flush(timeout_s=TIMEOUT_S)
    newer = session(dst_link, transactional_id)
    assert newer.producer is not None and zombie.producer is not None
    assert newer.producer.epoch > zombie.producer.epoch
    zombie.write((topic, 0), batches[1])
    with pytest.raises(ProducerFenced):
        zombie.flush(timeout_s=TIMEOUT_S)
    with pytest.raises(ProducerFenced):
        zombie.commit(timeout_s=TIMEOUT_S)

    # A zombie whose EndTxn is refused.
    newer.begin()
    newer.write((topic, 1), batches[2])
    newer.send_offsets(group, {(topic, 1): 1})
    newer.flush(timeout_s=TIMEOUT_S)
    newest = session(dst_link, transactional_id)
    with pytest.raises(ProducerFenced):
        newer.commit(timeout_s=TIMEOUT_S)
    with pytest.raises(ProducerFenced):
        newer.begin()

    newest.begin()
    newest.write((topic, 1), batches[3])
    newest.send_offsets(group, {(topic, 1): batches[3].next_offset})
    newest.commit(timeout_s=TIMEOUT_S)

    rows = read_all(src, source)
    assert payload(read_all(dst, topic, 0)) == []
    assert payload(read_all(dst, topic, 1)) == payload(
        [r for r in rows if batches[3].base_offset <= r[4] < batches[3].next_offset]
    )
    assert committed(dst, group, topic, 1) == batches[3].next_offset
