"""SourcePartitions over a consumer that keeps pauses the way librdkafka does, in generated
sequences of starts, pauses, resumes and stops: its invariants hold after every call, and a
partition started is always fetched."""

from __future__ import annotations

import random

import pytest
from confluent_kafka import TopicPartition

from strait.worker.source_partitions import SourcePartitions

Key = tuple[str, int]


class LibrdkafkaLikeConsumer:
    """Assignment, positions and application pauses, with librdkafka's rule that a pause
    survives an unassign and holds when the partition is assigned again."""

    def __init__(self) -> None:
        self.positions: dict[Key, int] = {}
        self.paused: set[Key] = set()
        self.calls: list[str] = []

    def incremental_assign(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            assert (tp.topic, tp.partition) not in self.positions, "assigned twice"
            self.positions[(tp.topic, tp.partition)] = tp.offset
        self.calls.append("assign")

    def incremental_unassign(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            del self.positions[(tp.topic, tp.partition)]
        self.calls.append("unassign")

    def seek(self, tp: TopicPartition) -> None:
        assert (tp.topic, tp.partition) in self.positions, "seek on an unassigned partition"
        self.positions[(tp.topic, tp.partition)] = tp.offset
        self.calls.append("seek")

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused |= {(tp.topic, tp.partition) for tp in tps}
        self.calls.append("pause")

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused -= {(tp.topic, tp.partition) for tp in tps}
        self.calls.append("resume")

    def fetching(self, key: Key) -> bool:
        return key in self.positions and key not in self.paused


def check(source: SourcePartitions, consumer: LibrdkafkaLikeConsumer, keys: list[Key]) -> None:
    for key in keys:
        if source.paused(key):
            assert source.assigned(key), f"{key} paused but not assigned"
        assert source.assigned(key) == (key in consumer.positions), key
        # The consumer's pause state never outlives the assignment.
        if key not in consumer.positions:
            assert key not in consumer.paused, f"{key} left the assignment paused"
        assert source.paused(key) == (key in consumer.paused), key


@pytest.mark.parametrize("seed", range(200))
def test_generated_sequences_keep_the_invariants_and_a_started_partition_fetches(seed: int) -> None:
    rng = random.Random(seed)
    consumer = LibrdkafkaLikeConsumer()
    source = SourcePartitions(consumer)
    keys: list[Key] = [("t", p) for p in range(3)]
    for _ in range(60):
        key, action = rng.choice(keys), rng.random()
        offset = rng.randrange(1000)
        if action < 0.3:
            source.start(key, offset)
            assert consumer.fetching(key) and consumer.positions[key] == offset
        elif action < 0.55:
            source.pause(key)
            assert not consumer.fetching(key)
        elif action < 0.75:
            was = source.assigned(key)
            source.resume_at(key, offset)
            assert consumer.fetching(key) == was
        else:
            source.stop(key)
            assert key not in consumer.positions
        check(source, consumer, keys)


def test_after_close_nothing_is_called() -> None:
    consumer = LibrdkafkaLikeConsumer()
    source = SourcePartitions(consumer)
    source.start(("t", 0), 5)
    source.pause(("t", 0))
    calls = list(consumer.calls)
    source.close()
    source.start(("t", 1), 0)
    source.pause(("t", 0))
    source.resume_at(("t", 0), 1)
    source.stop(("t", 0))
    assert consumer.calls == calls
    assert not source.assigned(("t", 0)) and not source.paused(("t", 0))
