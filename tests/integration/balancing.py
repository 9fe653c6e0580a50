"""Helpers for the balancer's real-cluster tests: topics pinned to dirs, records, live traffic, the CLI."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from strait import clients
from strait.balancer.gateway import KafkaGateway
from strait.balancer.throttle import BROKER_KEYS, TOPIC_KEYS

RECORD = b"t" * 1000


def wait(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def create(
    props: Mapping[str, Any], admin: Any, topic: str, assignments: Mapping[int, list[int]], dirs: Mapping[Any, str]
) -> None:
    """Create `topic` with explicit replica `assignments`, then pin each replica to its dir:
    `dirs` maps (partition, broker) to a log dir path."""
    admin.create_topics({topic: {"num_partitions": -1, "replication_factor": -1, "assignments": dict(assignments)}})
    gw = KafkaGateway(props)
    try:
        wait(lambda: len(gw.replicas([topic])) == len(assignments), 60, f"topic {topic}")
        wanted = {(topic, p, b): dirs[(p, b)] for p, reps in assignments.items() for b in reps}
        gw.move_dirs(wanted)
        brokers = sorted({b for reps in assignments.values() for b in reps})
        wait(
            lambda: all(
                d.current == wanted[k] and d.future is None
                for k, d in gw.replica_dirs(brokers, [topic]).items()
                if k in wanted
            ),
            60,
            f"{topic} pinned",
        )
    finally:
        gw.close()


def produce(props: Mapping[str, Any], topic: str, per_partition: Mapping[int, int]) -> int:
    # Small batches: a replication throttle can only hold back whole batches, so big ones burst.
    producer = clients.producer(props, **{"acks": "all", "linger.ms": 2, "batch.num.messages": 16})
    total = 0
    for partition, count in per_partition.items():
        for _ in range(count):
            producer.produce(topic, RECORD, partition=partition)
            producer.poll(0)
            total += 1
    assert producer.flush(60) == 0
    return total


class Writer:
    """Live traffic: writes `per_round` records to each of `partitions` every 50 ms until stopped;
    with `group`, a consumer group also reads the topic and commits every half second."""

    def __init__(
        self,
        props: Mapping[str, Any],
        topic: str,
        partitions: Iterable[int],
        *,
        group: str | None = None,
        per_round: int = 50,
    ) -> None:
        self.props, self.topic, self.group = dict(props), topic, group
        self.partitions, self.per_round = list(partitions), per_round
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.reader = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        consumer = clients.consumer(
            self.props, **{"group.id": self.group, "auto.offset.reset": "earliest", "auto.commit.interval.ms": 500}
        )
        consumer.subscribe([self.topic])
        while not self.stop.is_set():
            consumer.poll(0.2)
        consumer.close()

    def _run(self) -> None:
        # Idempotent: a retry while leadership moves must not write a record twice.
        producer = clients.producer(self.props, **{"acks": "all", "linger.ms": 5, "enable.idempotence": True})
        while not self.stop.is_set():
            for p in self.partitions:
                for _ in range(self.per_round):
                    producer.produce(self.topic, RECORD, partition=p)
                    self.sent += 1
            producer.poll(0)
            time.sleep(0.05)
        producer.flush(30)

    def __enter__(self) -> Writer:
        self.thread.start()
        if self.group:
            self.reader.start()
        wait(lambda: self.sent > 0, 30, "the writer to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        if self.group:
            self.reader.join(60)


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from strait.cli.balance import app; app()", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def config_file(path: Path, name: str, props: Mapping[str, Any], capacities: Mapping[str, str]) -> Path:
    """A configuration file naming cluster `name` with `capacities` under balance.capacities."""
    rules = "".join(f"      '{k}': {v}\n" for k, v in capacities.items())
    path.write_text(
        f"clusters:\n  {name}: {{bootstrap.servers: '{props['bootstrap.servers']}'}}\n"
        f"routes: [{{name: r, source: {name}, destination: {name}}}]\n"
        f"balance:\n  capacities:\n    {name}:\n{rules}"
    )
    return path


def count(props: Mapping[str, Any], topic: str) -> int:
    """Records readable from `topic`, every partition read to its end offset."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = clients.consumer(props, **{"group.id": f"count-{topic}-{time.time()}", "enable.auto.commit": False})
    gw = KafkaGateway(props)
    partitions = sorted(p for t, p in gw.replicas([topic]) if t == topic)
    gw.close()
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    seen = dict.fromkeys(partitions, 0)
    deadline = time.monotonic() + 60
    while any(seen[p] < ends[p] for p in partitions) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen[msg.partition() or 0] += 1
    consumer.close()
    return sum(seen.values())


def leftovers(props: Mapping[str, Any], brokers: Iterable[int], topics: list[str]) -> list[str]:
    """Anything an execution must not leave behind: reassignments, future replicas, throttles."""
    gw = KafkaGateway(props)
    brokers = list(brokers)
    problems: list[str] = []
    try:
        problems += [f"reassignment in progress: {k}" for k in gw.reassignments()]
        problems += [
            f"future replica {k} -> {d.future}" for k, d in gw.replica_dirs(brokers, topics).items() if d.future
        ]
        for t in topics:
            problems += [f"topic {t} {k}={v!r}" for k, v in gw.topic_configs(t, TOPIC_KEYS).items()]
        for b in brokers:
            problems += [f"broker {b} {k}={v}" for k, v in gw.broker_configs(b, BROKER_KEYS).items()]
    finally:
        gw.close()
    return problems
