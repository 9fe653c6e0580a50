"""The offset map's binary encoding (and the JSON one still read), and what the map costs:
counted once per publish or transaction, exposed on a worker's /metrics."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from strait import clients
from strait.metrics.worker import WorkerMetrics
from strait.offsetmap import store
from strait.offsetmap.codec import VERSION, MapEntry, decode, encode, encode_json
from strait.offsetmap.cost import MapCost, per_gigabyte
from strait.offsetmap.runs import Run, RunRecorder
from strait.offsetmap.store import MapWriter, TransactionMap

TOPIC_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"


def _entry(rng: random.Random) -> MapEntry:
    topic = "".join(rng.choice(TOPIC_CHARS) for _ in range(rng.randrange(1, 250)))
    destination = rng.choice([topic, "dc2." + topic, "".join(rng.choice(TOPIC_CHARS) for _ in range(7))])
    source = rng.choice([0, rng.randrange(1 << 7), rng.randrange(1 << 40), (1 << 63) - 1 - (1 << 20)])
    destination_offset = max(0, source + rng.randrange(-(1 << 20), 1 << 20))
    return MapEntry(
        topic, rng.randrange(0, 100_000), destination, Run(source, destination_offset, rng.randrange(1, 1 << 31))
    )


@pytest.mark.parametrize("seed", range(5))
def test_entries_survive_the_binary_encoding_and_the_old_json_one_is_still_read(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        entry = _entry(rng)
        key, value = encode(entry)
        assert value[0] == VERSION
        assert decode(value) == entry
        json_key, json_value = encode_json(entry)
        assert json_key == key == f"{entry.topic}/{entry.partition}".encode()
        assert decode(json_value) == entry, "entries written before version 1 stay readable"
        assert len(value) < len(json_value)


def test_a_run_takes_a_quarter_of_its_json_bytes() -> None:
    # A partition's usual run: same topic name on both sides, destination offsets near the source's.
    entry = MapEntry("orders", 3, "orders", Run(1_234_567, 1_234_000, 5_000))
    _key, value = encode(entry)
    _key, json_value = encode_json(entry)
    assert (len(value), len(json_value)) == (17, 67)


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\x02\x01\x06orders\x03\x00\x00\x01",  # a version this reader does not know
        b"\x01\x01\x06ord",  # cut inside the topic
        b"\x01\x01\x06orders\x03\x87",  # cut inside a varint
        b"\x01\x01\x06orders\x03\x00\x00\x01\x00",  # a byte too many
        b"\x01\x03\x06orders\x03\x00\x00\x01",  # an unknown flag
        b'{"t": "orders"}',
        b"{not json",
    ],
)
def test_what_is_not_an_entry_is_refused_as_such(value: bytes) -> None:
    with pytest.raises(ValueError):
        decode(value)


class FakeProducer:
    """Takes records; ``flush`` reports each delivered, or refused when ``refuse`` is set."""

    def __init__(self) -> None:
        self.refuse = False
        self.pending: list[Any] = []
        self.records: list[tuple[bytes, bytes]] = []

    def produce(self, topic: str, value: bytes, key: bytes, partition: int = -1, on_delivery: Any = None) -> None:
        self.records.append((key, value))
        self.pending.append(on_delivery)

    def poll(self, _timeout: float = 0) -> int:
        return self.flush()

    def flush(self, _timeout: float = 0) -> int:
        error = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED) if self.refuse else None
        for delivered in self.pending:
            delivered(error, None)
        self.pending.clear()
        return 0


def _sizes(records: list[tuple[bytes, bytes]]) -> int:
    return sum(len(k) + len(v) for k, v in records)


def test_a_transactions_runs_are_counted_once_written_and_lost_when_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "ensure_map_topic", lambda _destination, _topic: True)
    cost = MapCost()
    now = [0.0]
    tmap = TransactionMap({}, "r", retry_s=30, clock=lambda: now[0], cost=cost)
    producer = FakeProducer()
    runs = [("t", 0, "t", Run(0, 0, 10)), ("t", 1, "t", Run(5, 0, 3)), ("u", 0, "dc2.u", Run(7, 9, 1))]
    assert tmap.put(producer, runs, producer.flush) is None
    assert (cost.runs, cost.bytes, cost.lost) == (3, _sizes(producer.records), 0)
    written = cost.bytes

    producer.refuse = True
    assert tmap.put(producer, runs[:2], producer.flush) is not None  # the caller aborts
    assert (cost.runs, cost.lost) == (5, 2), "written (they take room in the log), and lost to the map"
    assert cost.bytes == _sizes(producer.records) > written

    # Not writable for retry_s: transactions go without runs, each one counted lost.
    assert tmap.put(producer, runs, producer.flush) is None
    assert (cost.runs, cost.lost) == (5, 5)
    now[0] = 31.0
    producer.refuse = False
    assert tmap.put(producer, runs[:1], producer.flush) is None
    assert (cost.runs, cost.lost) == (6, 5)


def test_an_at_least_once_publish_counts_what_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    producer = FakeProducer()
    monkeypatch.setattr(clients, "producer", lambda _destination, **_settings: producer)
    monkeypatch.setattr(store, "ensure_map_topic", lambda _destination, _topic: True)
    cost = MapCost()
    writer = MapWriter({}, "r", client_id="w", cost=cost)
    recorders = [RunRecorder(), RunRecorder()]
    for offset in range(1000):  # one run each, however many records
        recorders[0].note(offset, offset)
        recorders[1].note(offset + 50, offset)
    writer.publish(("t", p, "t", recorder) for p, recorder in enumerate(recorders))
    assert (cost.runs, cost.bytes) == (2, _sizes(producer.records))
    writer.publish(("t", p, "t", recorder) for p, recorder in enumerate(recorders))
    assert cost.runs == 2, "nothing changed: nothing written"
    recorders[0].note(1000, 1000)
    writer.publish(("t", p, "t", recorder) for p, recorder in enumerate(recorders))
    assert cost.runs == 3 and cost.lost == 0
    assert [decode(v).run for _k, v in producer.records] == [Run(0, 0, 1000), Run(50, 0, 1000), Run(0, 0, 1001)]


@dataclass(frozen=True)
class Task:
    route: str
    topic: str
    partition: int
    destination_topic: str


class FakeCopier:
    def __init__(self, stats: dict[Task, dict[str, Any]]) -> None:
        self._stats = stats

    def stats(self) -> Mapping[Any, Any]:
        return self._stats


def _samples(metrics: WorkerMetrics) -> dict[tuple[str, str], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (sample.name, sample.labels.get("route", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("strait_offset_map")
    }


def test_a_worker_exposes_the_maps_write_rate_and_bytes_per_gigabyte_copied() -> None:
    metrics = WorkerMetrics("w1")
    copied = {"bytes": 2_000_000_000, "records": 2_000_000, "state": "ok"}
    metrics.track("r", FakeCopier({Task("r", "t", 0, "t"): copied, Task("r", "t", 1, "t"): dict(copied)}))
    metrics.route("quiet")  # a route without a map (or nothing written yet): no series
    metrics.route("r").offset_map.written(40, 1_000)
    metrics.route("r").offset_map.failed(2)
    assert _samples(metrics) == {
        ("strait_offset_map_runs_total", "r"): 40,
        ("strait_offset_map_bytes_total", "r"): 1_000,
        ("strait_offset_map_runs_lost_total", "r"): 2,
        ("strait_offset_map_bytes_per_gigabyte_copied", "r"): 250.0,
    }
    assert per_gigabyte(10, 0) is None
