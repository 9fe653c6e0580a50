"""What every scenario shares.

The bench (one sandbox and the session's settings), replicators that are always stopped, a
cheap count of destination records, and a live-traffic session whose producer and reader run
as their own processes.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # re-exported, not in __all__

from strait import clients
from strait.bench import agent, positions, reader, workload
from strait.bench.mirrormaker import MirrorMaker2
from strait.bench.replicator import Replicator
from strait.bench.straitrun import StraitReplicator
from strait.config import ZookeeperConfig
from strait.sandbox import Sandbox

SYSTEMS = ("strait", "mm2")
SEC = 1_000_000  # µs


@dataclass
class Bench:
    """One sandbox and the settings shared by every run of a benchmark session."""

    sandbox: Sandbox
    workdir: Path
    systems: Sequence[str] = SYSTEMS
    log: Callable[[str], None] = print
    mm2_heap: str = "512m"
    # The configuration's default: the benchmarks measure Strait as it ships.
    session_timeout_s: float = ZookeeperConfig.model_fields["session_timeout_s"].default
    # The sandbox clusters copied from and to (`strait bench security` has a pair per security mode).
    src_cluster: str = "src"
    dst_cluster: str = "dst"
    # On clusters with ACLs: everything (workload and replicator) as the super user, not `strait`.
    super_user: bool = False
    # Where Strait's fleet coordinates: the sandbox's ZooKeeper, or the destination cluster (kafka).
    store: str = "zookeeper"
    # Where the replicators reach the source, when not at its own bootstrap (a delayed link in
    # front of it); the workload and the verifier still use the source directly.
    replicator_source: str | None = None
    _runs: int = field(default=0, init=False)

    @property
    def src(self) -> dict[str, str]:
        cluster = self.sandbox.clusters[self.src_cluster]
        return cluster.admin_props() if self.super_user else cluster.props()

    @property
    def dst(self) -> dict[str, str]:
        cluster = self.sandbox.clusters[self.dst_cluster]
        return cluster.admin_props() if self.super_user else cluster.props()

    def active_systems(self) -> list[str]:
        return [s for s in self.systems if s in SYSTEMS]

    def order(self, repeat: int) -> list[str]:
        """Systems in alternating order: a slow first run (cold caches) does not always hit the same one."""
        systems = self.active_systems()
        return systems if repeat % 2 == 0 else systems[::-1]

    def run_dir(self, label: str) -> Path:
        self._runs += 1
        path = self.workdir / f"{self._runs:03d}-{label}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def replicator(
        self,
        system: str,
        run_dir: Path,
        *,
        parallelism: int,
        compression: str = "none",
        nodes: int = 1,
        topics_pattern: str | None = None,
        mm2_refresh_topics_s: int = 5,
        mm2_rebalance_delay_ms: int = 10_000,
        delivery: str | None = None,
        mm2_extra: Mapping[str, str] | None = None,
        strait_groups: Mapping[str, Any] | None = None,
        strait_copy: str | None = None,
    ) -> Replicator:
        """``delivery`` sets Strait's route ``delivery`` (None leaves the default) and runs
        MirrorMaker 2 exactly-once for ``exactly-once``.
        ``mm2_extra`` (MirrorMaker only): properties set over the rendered ``mm2.properties``;
        ``strait_groups`` (Strait only): the route's ``groups`` (consumer-group offset sync);
        ``strait_copy`` (Strait only): the route's ``copy`` mode (batch or record)."""
        src_bootstrap = self.replicator_source or self.src["bootstrap.servers"]
        if system == "strait":
            return StraitReplicator(
                zookeeper=self.sandbox.zookeeper if self.store == "zookeeper" else None,
                store=self.store,
                src_props={**self.src, "bootstrap.servers": src_bootstrap},
                dst_props=self.dst,
                workdir=run_dir / "strait",
                workers=parallelism,
                compression=compression,
                session_timeout_s=self.session_timeout_s,
                delivery=delivery,
                groups=strait_groups,
                copy=strait_copy,
            )
        if delivery not in (None, "at-least-once", "exactly-once"):
            raise ValueError(f"unknown delivery {delivery!r}: at-least-once or exactly-once")
        return MirrorMaker2(
            src_bootstrap=src_bootstrap,
            dst_bootstrap=self.dst["bootstrap.servers"],
            # On secured clusters MirrorMaker runs as the super user: its Connect group and
            # internal topics are not among the ACLs of Strait's least-privilege user.
            src_props=self.sandbox.clusters[self.src_cluster].admin_props(),
            dst_props=self.sandbox.clusters[self.dst_cluster].admin_props(),
            workdir=run_dir / "mm2",
            tasks=parallelism,
            nodes=nodes,
            compression=compression,
            refresh_topics_s=mm2_refresh_topics_s,
            rebalance_delay_ms=mm2_rebalance_delay_ms,
            heap=self.mm2_heap,
            topics_pattern=topics_pattern,
            extra=mm2_extra,
            exactly_once=delivery == "exactly-once",
        )


@contextlib.contextmanager
def running(replicator: Replicator, topics: Sequence[str]) -> Iterator[Replicator]:
    """Start a replicator and always stop it, whatever happens in between."""
    try:
        replicator.start(topics)
        yield replicator
    finally:
        replicator.stop()


class DestinationCount:
    """Records present on the destination (sum of end offsets): one cheap request per poll, no data read."""

    def __init__(self, props: Mapping[str, Any], topics: Mapping[str, int]) -> None:
        self._admin = clients.admin(props)
        self._topics = dict(topics)
        self._present: set[str] = set()

    def count(self) -> int:
        missing = [t for t in self._topics if t not in self._present]
        if missing:
            # Until the replicator creates a destination topic, list_offsets cannot find its leader.
            metadata = self._admin.list_topics(timeout=5)
            for topic in missing:
                meta = metadata.topics.get(topic)
                if meta is not None and meta.error is None and len(meta.partitions) == self._topics[topic]:
                    self._present.add(topic)
        if not self._present:
            return 0
        spec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(t, p): spec for t in self._present for p in range(self._topics[t])}
        total = 0
        for future in self._admin.list_offsets(request, request_timeout=5).values():
            try:
                total += max(0, future.result(timeout=10).offset)
            except KafkaException:
                continue  # a leader moving; the next poll counts it
        return total

    def wait_for(self, expected: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.count() >= expected:
                return True
            time.sleep(0.1)
        return False

    def close(self) -> None:
        """Release the clients (nothing to do for end offsets)."""


class CommittedCount(DestinationCount):
    """Records an exactly-once route has committed: the sum of its destination checkpoints.

    End offsets overcount a transactional copy (every commit adds a marker to each partition it
    wrote) and include records not committed yet. An exactly-once route's checkpoints (source
    offsets, in the destination group ``strait.<route>``) commit in the same transaction as the
    records they cover, so for a source topic written without transactions their sum is exactly
    the number of records a ``read_committed`` reader can see. Read with a consumer's
    ``committed()`` (never subscribed, ``read_uncommitted`` so it does not wait for a pending
    transaction): the admin call crashes librdkafka on a loading coordinator (librdkafka#5040).
    """

    def __init__(self, props: Mapping[str, Any], topics: Mapping[str, int], *, route: str = "bench") -> None:
        from strait.worker.transactional_checkpoints import destination_group

        super().__init__(props, topics)
        self._consumer = clients.consumer(
            props,
            **{
                "group.id": destination_group(route),
                "enable.auto.commit": False,
                "isolation.level": "read_uncommitted",
                "log_level": 3,
            },
        )

    def count(self) -> int:
        partitions = [TopicPartition(t, p) for t, n in self._topics.items() for p in range(n)]
        committed = self._consumer.committed(partitions, timeout=5)
        return sum(max(0, tp.offset) for tp in committed if tp.error is None)

    def close(self) -> None:
        self._consumer.close()


class ConnectCommittedCount(DestinationCount):
    """Records MirrorMaker 2 has committed exactly-once: the sum of the source offsets its tasks
    committed to Connect's offsets topic, which KIP-618 writes in the same transactions as the
    records (the counterpart of :class:`CommittedCount`). The offsets topic is read
    ``read_committed`` as it grows, from the moment MirrorMaker creates it."""

    def __init__(self, props: Mapping[str, Any], offsets_topic: str, topics: Mapping[str, int]) -> None:
        super().__init__(props, topics)
        self._consumer = clients.consumer(
            props,
            **{
                "group.id": "strait-bench-connect-offsets",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "log_level": 3,
            },
        )
        self._offsets_topic = offsets_topic
        self._keys = {(t, p) for t, n in topics.items() for p in range(n)}
        self._assigned = False
        self._latest: dict[tuple[str, int], int | None] = {}

    def count(self) -> int:
        if not self._assigned:
            meta = self._admin.list_topics(self._offsets_topic, timeout=5).topics.get(self._offsets_topic)
            if meta is None or meta.error is not None or not meta.partitions:
                return 0
            self._consumer.assign([TopicPartition(self._offsets_topic, p, OFFSET_BEGINNING) for p in meta.partitions])
            self._assigned = True
        # What has arrived by now, within a poll's time: MirrorMaker writes while it copies, so
        # reading until nothing is left would last the whole copy.
        until = time.monotonic() + 0.05
        while (left := until - time.monotonic()) > 0 and (messages := self._consumer.consume(10_000, timeout=left)):
            found = [(m.key(), m.value()) for m in messages if m.error() is None]
            self._latest.update(positions.parse_connect_offsets(found))
        # Connect stores the offset of the last record copied.
        return sum(offset + 1 for key, offset in self._latest.items() if key in self._keys and offset is not None)

    def close(self) -> None:
        self._consumer.close()


def verdict(
    bench: Bench, replicator: Replicator, arrivals: reader.Arrivals, expected: Mapping[tuple[str, int], int]
) -> dict[str, Any]:
    """The verifier's summary of a run, its missing records split into lost (the replicator's
    committed position moved past them) and not yet copied (`strait.bench.positions`)."""
    report = positions.audit(
        replicator,
        arrivals.verifier(expected),
        bench.src,
        bench.dst,
        log=bench.log,
        offsets_props=bench.sandbox.clusters[bench.dst_cluster].admin_props(),  # MirrorMaker's own user (see above)
    )
    return report.summary()


def topic_name(*parts: object) -> str:
    return "-".join(str(p) for p in parts)


def ratio(strait: float | None, mm2: float | None) -> float | None:
    if strait is None or mm2 is None or mm2 == 0:
        return None
    return round(strait / mm2, 3)


def mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


# ---- live traffic: shared by latency, add-topics and worker failure ------------------------------


@dataclass
class Live:
    """A replicator copying live traffic, with an independent reader on the destination."""

    bench: Bench
    run_dir: Path
    replicator: Replicator
    expected: workload.Counts
    readers: agent.Agent | None = None
    producers: list[agent.Agent] = field(default_factory=list)

    def warm(self, topics: Mapping[str, int], size: int, timeout_s: float = 180) -> None:
        """Start the replicator and wait until it has copied one probe record per partition."""
        self.replicator.start(list(topics))
        self.expected.update(workload.probe(self.bench.src, topics, size))
        counter = DestinationCount(self.bench.dst, topics)
        if not counter.wait_for(sum(topics.values()), timeout_s):
            raise RuntimeError(f"{self.replicator.name} copied no probe record within {timeout_s:.0f}s")
        if isinstance(self.replicator, MirrorMaker2) and not self.replicator.wait_tasks_started(60):
            self.bench.log("  (not every MirrorMaker task reported started within 60s; continuing)")

    def read(
        self, topics: Sequence[str], ready: Sequence[str], deadline_s: float, *, isolation_level: str | None = None
    ) -> None:
        self.readers = agent.start_reader(
            self.run_dir / "read.json",
            self.bench.dst,
            topics,
            ready_topics=ready,
            deadline_s=deadline_s,
            isolation_level=isolation_level,
        )
        agent.wait_ready(self.readers)

    def produce(
        self,
        label: str,
        topics: Mapping[str, int],
        *,
        rate: float,
        duration_s: float,
        size: int,
        payload: str = "filler",
    ) -> None:
        start_seq = {k: v for k, v in self.expected.items() if k[0] in topics}
        self.producers.append(
            agent.start_producer(
                self.run_dir / f"produce-{label}.json",
                self.bench.src,
                topics,
                rate=rate,
                duration_s=duration_s,
                size=size,
                start_seq=start_seq,
                payload=payload,
            )
        )

    def finish(self, *, drain_s: float) -> tuple[reader.Arrivals, list[tuple[int, int]]]:
        """Wait for the producers, then for the reader to see every record (or ``drain_s``)."""
        windows = []
        for producer in self.producers:
            producer.wait(3600)
            counts, started_us, ended_us = agent.producer_result(producer)
            self.expected.update(counts)
            windows.append((started_us, ended_us))
        assert self.readers is not None
        arrivals = agent.stop_reader(self.readers, sum(self.expected.values()), drain_s=drain_s)
        return arrivals, windows

    def close(self) -> None:
        for child in [*self.producers, *([self.readers] if self.readers else [])]:
            child.kill()
        self.replicator.stop()


@contextlib.contextmanager
def live(bench: Bench, run_dir: Path, replicator: Replicator) -> Iterator[Live]:
    session = Live(bench, run_dir, replicator, {})
    try:
        yield session
    finally:
        session.close()


def run_safely(result: dict[str, Any], body: Callable[[], None]) -> dict[str, Any]:
    try:
        body()
    except Exception as exc:  # a failed run is a result to record, not the end of the benchmark
        result["error"] = f"{type(exc).__name__}: {exc}"
    return result


def rate_series(times_us: Sequence[int], origin_us: int, bucket_s: float = 0.5) -> list[tuple[float, float]]:
    """Arrivals per second in ``bucket_s`` buckets, time relative to ``origin_us``: the curve a gap shows in."""
    if not times_us:
        return []
    bucket = int(bucket_s * SEC)
    counts: dict[int, int] = {}
    for t in times_us:
        counts[(t - origin_us) // bucket] = counts.get((t - origin_us) // bucket, 0) + 1
    lo, hi = min(counts), max(counts)
    return [(round(b * bucket_s, 2), counts.get(b, 0) / bucket_s) for b in range(lo, hi + 1)]
