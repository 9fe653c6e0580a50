"""What the fault suite shares: fleets on any sandbox, seeded load, and a verifier that also
reads the destination in offset order to check how duplicates are laid out.

`tests.integration.verify.verify` counts lost, duplicated and out-of-order records. Under a
fault, duplicates are allowed (at-least-once across a failure), but only as *re-sent ranges*:
a new owner, or a zombie, copying again from an older checkpoint writes a contiguous, ascending
run of records already present. `order_of` checks exactly that, per partition, from the
sequence numbers in offset order:

- every record seen for the first time is the next one (`seq == highest + 1`): new records
  arrive in order and without gaps;
- a repeated record either starts a re-sent range or continues the current one
  (`seq == previous + 1`); anything else is an interleaving of two writers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strait import clients
from strait.demo import Fleet, Generator, wait_until
from strait.sandbox import Sandbox
from tests.integration.verify import Report, copied_counts, verify


@dataclass
class OrderReport:
    """How one topic's copy is laid out, partition by partition, in offset order."""

    records: int = 0
    new_out_of_order: int = 0  # a first occurrence that is not the next sequence number
    interleaved: int = 0  # a repeat that neither starts nor continues a re-sent range
    resent_ranges: int = 0
    resent_records: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ordered(self) -> bool:
        return self.new_out_of_order == 0 and self.interleaved == 0


def order_of(sequences: Mapping[int, Sequence[int]]) -> OrderReport:
    """Check that new records arrive in order and repeats form re-sent ranges (see module doc)."""
    report = OrderReport()
    for partition, seqs in sorted(sequences.items()):
        highest, previous, in_range = -1, -2, False
        for offset, seq in enumerate(seqs):
            report.records += 1
            if seq > highest:
                if seq != highest + 1:
                    report.new_out_of_order += 1
                    report.problems.append(f"p{partition}@{offset}: {seq} after highest {highest} (gap)")
                highest, in_range = seq, False
            else:
                report.resent_records += 1
                if in_range and seq != previous + 1:
                    report.interleaved += 1
                    report.problems.append(f"p{partition}@{offset}: repeat {seq} after {previous}")
                if not in_range or seq != previous + 1:
                    report.resent_ranges += 1
                in_range = True
            previous = seq
    return report


def read_sequences(
    props: Mapping[str, Any], topic: str, partitions: int, timeout_s: float = 60
) -> dict[int, list[int]]:
    """Sequence numbers of every record of `topic`, per partition in offset order (up to the end now)."""
    ends = copied_counts(props, topic, partitions)
    out: dict[int, list[int]] = {p: [] for p in range(partitions)}
    consumer = clients.consumer(props, **{"group.id": "strait-faults-order", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
    deadline = time.monotonic() + timeout_s
    reached = {p for p in range(partitions) if ends[p] == 0}
    try:
        while len(reached) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=5000, timeout=0.5):
                value = message.value()
                if message.error() is not None or value is None:
                    continue
                p = message.partition()
                out[p].append(int(value.decode().split(":")[1]))
                if message.offset() + 1 >= ends[p]:
                    reached.add(p)
    finally:
        consumer.close()
    assert len(reached) == partitions, f"could not read {topic} to its end within {timeout_s}s"
    return out


@dataclass
class Outcome:
    """A scenario's result, printed and appended to the progress file."""

    scenario: str
    report: Report
    order: OrderReport
    measures: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        r, o = self.report, self.order
        extra = " ".join(f"{k}={v:.2f}" for k, v in self.measures.items())
        return (
            f"FAULT {self.scenario}: expected={r.expected} copied={r.copied} lost={r.lost} duplicates={r.duplicates}"
            f" resent_ranges={o.resent_ranges} new_out_of_order={o.new_out_of_order} interleaved={o.interleaved}"
            f" bad_metadata={r.bad_metadata} {extra}"
        ).rstrip()


def check(
    scenario: str,
    dst: Mapping[str, Any],
    topic: str,
    produced: Mapping[int, int],
    record_property: Callable[[str, object], None],
    measures: Mapping[str, float] | None = None,
    *,
    require_ranges: bool = True,
) -> Outcome:
    """Verify a topic's copy: 0 lost, new records in order, duplicates reported (and printed)."""
    report = verify(dst, topic, produced, timeout_s=90)
    order = order_of(read_sequences(dst, topic, len(produced)))
    outcome = Outcome(scenario, report, order, dict(measures or {}))
    print("\n" + outcome.line())
    if order.problems:
        print("  first order problems: " + "; ".join(order.problems[:5]))
    for key, value in {"lost": report.lost, "duplicates": report.duplicates, **outcome.measures}.items():
        record_property(f"{scenario}_{key}", value)
    assert report.lost == 0, f"{scenario}: {report.lost} records lost: {report.lost_by_partition}"
    assert report.bad_metadata == 0, report
    assert order.new_out_of_order == 0, order.problems[:10]
    if require_ranges:
        assert order.interleaved == 0, order.problems[:10]
    return outcome


def create_topic(
    props: Mapping[str, Any], topic: str, partitions: int, replicas: int = 1, configs: Mapping[str, str] | None = None
) -> None:
    admin = clients.admin(props)
    future = admin.create_topics([NewTopic(topic, partitions, replicas, config=dict(configs or {}))])[topic]
    future.result(timeout=60)
    # Every partition must have a leader before the generator's first record.
    assert wait_until(
        lambda: (
            all(p.leader >= 0 for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values())
            and len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == partitions
        ),
        60,
    )


@contextmanager
def fleets(sandbox: Sandbox, workdir: Path, src: str = "src", dst: str = "dst") -> Iterator[Callable[..., Fleet]]:
    """Make fleets on `sandbox` replicating cluster `src` to `dst` (route "main"); all stop at exit."""
    made: list[Fleet] = []

    def make(**options: Any) -> Fleet:
        fleet = Fleet(
            zookeeper=sandbox.zookeeper,
            clusters={"src": sandbox.clusters[src].props(), "dst": sandbox.clusters[dst].props()},
            routes=[{"name": "main", "source": "src", "destination": "dst", **options.pop("route", {})}],
            workdir=workdir / f"fleet-{len(made)}",
            **options,
        )
        made.append(fleet)
        return fleet

    try:
        yield make
    finally:
        for fleet in made:
            fleet.stop(timeout_s=30)


@contextmanager
def load(props: Mapping[str, Any], topics: Mapping[str, int], rate_per_partition: float) -> Iterator[Generator]:
    """Continuous sequence-numbered load on `topics` until the block ends (then flushed)."""
    generator = Generator(props, rate_per_partition=rate_per_partition)
    for topic, partitions in topics.items():
        generator.add(topic, partitions)
    generator.start()
    try:
        yield generator
    finally:
        generator.stop()


def owners(fleet: Fleet, topic: str) -> dict[int, str | None]:
    """Partition -> assigned worker of `topic` on route main."""
    prefix = f"main/{topic}/"
    return {
        int(key[len(prefix) :]): worker
        for key, worker in fleet.api().call("GET", "/assignment").items()
        if key.startswith(prefix)
    }


def copy_modes(fleet: Fleet, topic: str) -> dict[int, str]:
    """Partition -> how its owner copies it ("batch" or "record (<why>)"), as `/topics/{topic}` shows."""
    detail = fleet.api().call("GET", f"/topics/{topic}")["partition_detail"]
    return {
        int(p["partition"]): str(p.get("mode")) + (f" ({p['mode_reason']})" if p.get("mode_reason") else "")
        for p in detail
    }


def copy_route(copy: str) -> dict[str, Any]:
    """Route options that copy in mode `copy` throughout: the default copies a batch route's
    caught-up partitions record by record (strait.worker.moves), and a batch-mode fault test of
    a trickle would then prove nothing about batch mode."""
    return {"copy": copy, "catchup_lag_threshold": None} if copy == "batch" else {"copy": copy}


def in_mode(fleet: Fleet, topic: str, partitions: int, copy: str, timeout_s: float = 60) -> None:
    """Wait until every partition of `topic` is copied in mode `copy`: a batch-mode fault test that
    fell back to record mode would prove nothing about batch mode."""

    def all_in_mode() -> bool:
        modes = copy_modes(fleet, topic)
        return len(modes) == partitions and all(m.split(" ")[0] == copy for m in modes.values())

    assert wait_until(all_in_mode, timeout_s, interval_s=0.5), (
        f"{topic} not copied in {copy} mode: {copy_modes(fleet, topic)}"
    )


def flowing(dst: Mapping[str, Any], topic: str, partitions: Sequence[int], total: int, timeout_s: float) -> float:
    """Wait until each of `partitions` of the copy grows past its size now; seconds it took."""
    started = time.monotonic()
    baseline = _counts_when_answered(dst, topic, total, timeout_s)
    assert wait_until(
        lambda: all(copied_counts(dst, topic, total)[p] > baseline[p] for p in partitions), timeout_s, interval_s=0.1
    ), f"partitions {sorted(partitions)} of {topic} did not flow again within {timeout_s}s"
    return time.monotonic() - started


def _counts_when_answered(dst: Mapping[str, Any], topic: str, total: int, timeout_s: float) -> dict[int, int]:
    """`copied_counts`, asked again while a broker restarted a moment ago answers NOT_LEADER."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return copied_counts(dst, topic, total)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def all_flowing(dst: Mapping[str, Any], topic: str, partitions: int, timeout_s: float = 60) -> None:
    assert wait_until(lambda: all(n > 0 for n in copied_counts(dst, topic, partitions).values()), timeout_s), (
        f"{topic} is not copied to every partition within {timeout_s}s"
    )


def caught_up(dst: Mapping[str, Any], topic: str, produced: Mapping[int, int], timeout_s: float = 90) -> None:
    """Wait until the copy holds at least as many records as were produced, per partition."""
    assert wait_until(
        lambda: all(n >= produced.get(p, 0) for p, n in copied_counts(dst, topic, len(produced)).items()),
        timeout_s,
        interval_s=0.3,
    ), f"{topic} did not catch up within {timeout_s}s"
