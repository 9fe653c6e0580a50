"""The exactly-once batch pipeline (strait.worker.batch.transactional) over a simulated source log
and a simulated transactional destination: batches and checkpoints commit together, an abort
sends the partitions back to their committed checkpoints, a fence (or a commit of unknown
outcome) stops them with a ``fenced:`` error, releases wait for the commit, abandons abort.

Generated histories of adds, releases, abandons, source appends, aborts, fences and lost
commits keep the invariants: a read_committed view of the destination holds every source record
of the copied range exactly once, in order; the committed checkpoints never pass what a
read_committed reader sees; nothing is written by a session after it was fenced; with an offset
map, its committed runs send each committed record's source offset to exactly the destination
offset a read_committed reader finds it at.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from strait.offsetmap.codec import decode, map_topic
from strait.offsetmap.store import TransactionMap
from strait.offsetmap.translate import merge
from strait.worker.batch.compat import DestinationTopic
from strait.worker.batch.link import Key
from strait.worker.batch.records import RecordBatch, split_batches
from strait.worker.batch.select import AbortedTransaction
from strait.worker.batch.transactional import TransactionalBatchPipeline
from strait.worker.batch.transactions import ProducerFenced, SessionDead, TransactionAbortable
from strait.worker.pipeline import PartitionState
from strait.worker.task import PartitionTask
from tests.unit.test_batch_pipeline import FakeSource
from tests.unit.test_batch_records import build, control_batch

GZIP = 1
NONE = 0
GROUP = "strait.r"
TXN_ID = "txn"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Txn:
    epoch: int
    session: FakeSession | None = None
    # (destination partition, source offsets, payload, destination base offset)
    writes: list[tuple[Key, list[int], bytes, int]] = field(default_factory=list)
    raws: list[tuple[Key, bytes]] = field(default_factory=list)  # the whole batches written
    offsets: dict[Key, int] = field(default_factory=dict)
    status: str = "open"  # committed, aborted; "prepared": EndTxn(commit) reached the coordinator


class FakeCluster:
    """The destination's transaction coordinator, partitions and group, as read_committed readers
    see them. ``faults`` are served to the session's next call that can meet them."""

    def __init__(self) -> None:
        self.epoch: dict[str, int] = {}
        self.txns: list[Txn] = []
        self.group: dict[Key, int] = {}
        self.faults: list[str] = []
        self.writes_after_death = 0
        self.sessions: list[FakeSession] = []
        self.ends: dict[Key, int] = {}  # destination log ends: every batch and marker takes offsets

    def append(self, key: Key, count: int) -> int:
        base = self.ends.get(key, 0)
        self.ends[key] = base + count
        return base

    def end(self, txn: Txn, status: str) -> None:
        """The transaction ends: a marker in each partition it wrote."""
        txn.status = status
        for key in {w[0] for w in txn.writes}:
            self.append(key, 1)

    def take_id(self, transactional_id: str) -> int:
        """InitProducerId: a new epoch; the earlier epoch's open transaction is aborted, a
        prepared commit completed."""
        for txn in self.txns:
            if txn.status == "open":
                self.end(txn, "aborted")
            elif txn.status == "prepared":
                self._commit(txn)
        self.epoch[transactional_id] = self.epoch.get(transactional_id, 0) + 1
        return self.epoch[transactional_id]

    def _commit(self, txn: Txn) -> None:
        self.end(txn, "committed")
        self.group.update(txn.offsets)

    def checkpoint(self, key: Key) -> int:
        """The group's offset as a stable read gets it (OffsetFetch with require_stable, as
        DestinationCheckpoints reads it): it waits for the transactions with pending offsets to
        end. A prepared commit completes by itself; a dead session's open transaction is aborted
        at its timeout (the read waits for it). A live session's open transaction never has
        pending offsets of a partition being started."""
        for txn in self.txns:
            if txn.status == "prepared":
                self._commit(txn)
            elif txn.status == "open" and txn.session is not None:
                if txn.session.dead or self.epoch.get(txn.session.id) != txn.epoch:
                    self.end(txn, "aborted")
                else:
                    assert key not in txn.offsets, f"{key}: started while its offsets are pending"
        return self.group.get(key, 0)

    def committed_offsets(self, key: Key) -> list[int]:
        """The source offsets of the records a read_committed reader sees in ``key``, in order."""
        committed = [w for txn in self.txns if txn.status == "committed" for w in txn.writes]
        return [o for k, offs, _, _ in committed if k == key for o in offs]

    def committed_payloads(self, key: Key) -> list[bytes]:
        return [p for txn in self.txns if txn.status == "committed" for k, _, p, _ in txn.writes if k == key]

    def committed_places(self, key: Key) -> dict[int, int]:
        """Source offset to the destination offset a read_committed reader finds it at."""
        return {
            o: base + i
            for txn in self.txns
            if txn.status == "committed"
            for k, offs, _, base in txn.writes
            if k == key
            for i, o in enumerate(offs)
        }

    def committed_map(self, route: str = "r") -> dict[Key, dict[int, int]]:
        """What the offset map's committed runs say, per source partition (merged as a reader
        merges them): source offset to destination offset."""
        runs: dict[Key, list[Any]] = {}
        for txn in self.txns:
            if txn.status != "committed":
                continue
            for k, raw in txn.raws:
                if k == (map_topic(route), 0):
                    for record in DefaultRecordBatch(raw):
                        entry = decode(record.value)
                        runs.setdefault((entry.topic, entry.partition), []).append(entry.run)
        return {
            key: {run.source + i: run.destination + i for run in merge(found) for i in range(run.count)}
            for key, found in runs.items()
        }


class FakeSession:
    def __init__(
        self, cluster: FakeCluster, transactional_id: str, meanwhile: Callable[[], None] | None = None
    ) -> None:
        # What the pipeline does while a flush or a commit waits (it fetches ahead).
        self.meanwhile = meanwhile or (lambda: None)
        self.cluster = cluster
        self.id = transactional_id
        self.epoch = 0
        self.dead = False
        self.txn: Txn | None = None
        self.failed: TransactionAbortable | None = None
        self.stored: list[tuple[Key, RecordBatch, int]] = []
        cluster.sessions.append(self)

    def _check(self) -> None:
        if self.dead:
            raise SessionDead("dead")
        if self.cluster.epoch.get(self.id) != self.epoch:
            self.dead = True
            raise ProducerFenced("fenced by a newer epoch")

    def _fault(self, kinds: set[str]) -> None:
        faults = self.cluster.faults
        if faults and faults[0] in kinds:
            kind = faults.pop(0)
            if kind == "abortable" and self.txn is not None:
                self.failed = TransactionAbortable("a batch refused for good")
            elif kind == "fenced":
                self.cluster.take_id(self.id)  # another instance took the id
        self._check()
        if self.failed is not None:
            raise self.failed

    def init(self, *, timeout_s: float) -> None:
        assert timeout_s > 0
        self.epoch = self.cluster.take_id(self.id)

    def begin(self) -> None:
        self._check()
        assert self.txn is None, "begin with a transaction open"
        self.txn = Txn(self.epoch, self)
        self.cluster.txns.append(self.txn)
        self.stored = []

    def write(self, key: Key, batch: RecordBatch) -> int:
        if self.dead:
            self.cluster.writes_after_death += 1
            raise SessionDead("dead")
        assert self.txn is not None and self.txn.status == "open"
        assert not batch.is_control and not batch.has_inner_gaps
        if self.cluster.epoch.get(self.id) == self.epoch:  # a zombie's batches are refused
            offsets = list(range(batch.base_offset, batch.base_offset + batch.record_count))
            base = self.cluster.append(key, batch.last_offset_delta + 1)
            self.txn.writes.append((key, offsets, bytes(batch.payload()), base))
            self.txn.raws.append((key, bytes(batch.data)))
            self.stored.append((key, batch, base))
        return 0

    def appended(self) -> list[tuple[Key, RecordBatch, int]]:
        stored, self.stored = self.stored, []
        return stored

    def send_offsets(self, group: str, offsets: Mapping[Key, int]) -> None:
        self._check()
        assert self.txn is not None and group == GROUP
        self.txn.offsets.update(offsets)

    def pump(self, timeout_s: float = 0.0) -> None:
        self._fault({"abortable", "fenced"})

    def flush(self, *, timeout_s: float) -> None:
        assert timeout_s > 0
        self.meanwhile()
        self.meanwhile()  # a fetch sent, then its answer taken
        self._fault({"abortable", "fenced"})

    def commit(self, *, timeout_s: float) -> None:
        assert timeout_s > 0
        self.meanwhile()
        self._fault({"abortable", "fenced"})
        assert self.txn is not None
        faults = self.cluster.faults
        if faults and faults[0] in ("commit_lost", "commit_done"):
            kind = faults.pop(0)
            if kind == "commit_done":
                self.txn.status = "prepared"  # reached the coordinator; the answer did not come
            self.dead = True
            raise SessionDead("commit not done within the deadline")
        self.cluster._commit(self.txn)
        self.txn = None

    def abort(self, *, timeout_s: float) -> None:
        assert timeout_s > 0
        self._check()
        if self.txn is not None:
            self.cluster.end(self.txn, "aborted")
        self.txn = None
        self.failed = None
        self.stored = []


class FakeDestinationLink:
    def destination_topic(self, topic: str) -> DestinationTopic:
        return DestinationTopic()


class FakeLinks:
    def __init__(self, source: FakeSource, clock: Clock) -> None:
        self.source = source
        self.destination = FakeDestinationLink()
        self.clock = clock

    def poll(self, timeout_s: float) -> None:
        self.clock.now += max(timeout_s, 0.01)

    def close(self) -> None:
        pass


# -- the source ----------------------------------------------------------------------------


class SourceLog:
    """A partition written in segments: plain batches, committed and aborted transactions."""

    def __init__(self) -> None:
        self.raws: list[bytes] = []
        self.end = 0
        self.data: list[int] = []  # offsets a read_committed reader sees
        self.aborted: list[AbortedTransaction] = []
        self.pid = 500

    def plain(self, batches: int, size: int = 3, codec: int = GZIP) -> None:
        for _ in range(batches):
            self.raws.append(build(self.end, size, codec=codec))
            self.data += range(self.end, self.end + size)
            self.end += size

    def transaction(self, batches: int, *, commit: bool, size: int = 2) -> None:
        self.pid += 1
        first = self.end
        for i in range(batches):
            self.raws.append(build(self.end, size, codec=GZIP, producer=(self.pid, 0, i * size), transactional=True))
            if commit:
                self.data += range(self.end, self.end + size)
            self.end += size
        if not commit:
            self.aborted.append(AbortedTransaction(self.pid, first))
        self.raws.append(control_batch(self.end, self.pid, 1 if commit else 0))
        self.end += 1


def make_source(logs: dict[Key, SourceLog]) -> FakeSource:
    src = FakeSource({k: v.raws for k, v in logs.items()})
    src.aborted = {k: v.aborted for k, v in logs.items()}
    return src


def setup(
    logs: dict[Key, SourceLog], **options: Any
) -> tuple[TransactionalBatchPipeline, FakeCluster, FakeSource, Clock]:
    cluster, clock = FakeCluster(), Clock()
    src = make_source(logs)
    # Scenarios that hold a transaction open set a long interval: no early commit either,
    # unless they ask for one.
    options.setdefault("transaction_linger_s", 1000.0)
    if options.pop("offset_map", False):
        options["offset_map"] = ReadyMap()
    pipelines: list[TransactionalBatchPipeline] = []
    pipeline = TransactionalBatchPipeline(
        name="txb",
        source={},
        destination={},
        client_id="c",
        transactional_id=TXN_ID,
        checkpoint_group=GROUP,
        links=FakeLinks(src, clock),  # type: ignore[arg-type]
        session_factory=lambda link: FakeSession(cluster, TXN_ID, meanwhile=pipelines[0]._fetch_ahead),
        clock=clock,
        **options,
    )
    pipelines.append(pipeline)
    return pipeline, cluster, src, clock


class ReadyMap(TransactionMap):
    """The route's offset map, its topic there (no admin client)."""

    def __init__(self) -> None:
        super().__init__({}, "r")

    def writable(self) -> bool:
        return True


def start(pipeline: TransactionalBatchPipeline, key: Key, offset: int = 0, *, move: bool = False) -> PartitionState:
    state = PartitionState(PartitionTask("r", key[0], key[1], key[0]))
    pipeline.add(state, offset, move=move)
    return state


def run(pipeline: TransactionalBatchPipeline, until: Callable[[], bool], steps: int = 300) -> None:
    for _ in range(steps):
        pipeline._step()
        if until():
            return
    raise AssertionError("the pipeline did not get there")


def check_committed(cluster: FakeCluster, logs: dict[Key, SourceLog]) -> None:
    """What read_committed readers see: each partition's source records below its committed
    checkpoint, each once, in order."""
    for key, log in logs.items():
        seen = cluster.committed_offsets(key)
        checkpoint = cluster.group.get(key, 0)
        assert seen == [o for o in log.data if o < checkpoint], f"{key}: {seen} vs checkpoint {checkpoint}"


def check_map(cluster: FakeCluster, logs: dict[Key, SourceLog]) -> None:
    """The committed runs map every committed record, and nothing else, to where it is."""
    mapped = cluster.committed_map()
    for key in logs:
        assert mapped.get(key, {}) == cluster.committed_places(key), key


# -- scenarios -----------------------------------------------------------------------------


def test_batches_and_checkpoints_commit_together() -> None:
    logs = {("t", 0): SourceLog(), ("t", 1): SourceLog()}
    logs[("t", 0)].plain(5)
    logs[("t", 0)].transaction(2, commit=False)
    logs[("t", 0)].transaction(2, commit=True)
    logs[("t", 0)].plain(2)
    logs[("t", 1)].plain(3)
    pipeline, cluster, _, _ = setup(logs, merge_bytes=0)  # each batch passes as it is
    states = [start(pipeline, key) for key in logs]
    run(pipeline, lambda: all(s.checkpoint == logs[("t", s.task.partition)].end for s in states))
    check_committed(cluster, logs)
    for state, (key, log) in zip(states, logs.items(), strict=True):
        assert cluster.group[key] == log.end == state.durable
        assert state.records == len(log.data) and state.mode == "batch"
        # The copies are the source batches' records, byte for byte (control and aborted dropped).
        source = [bytes(b.payload()) for raw in log.raws for b in split_batches(raw).batches]
        assert set(cluster.committed_payloads(key)) <= set(source)
    assert pipeline.transactions >= 1


def test_checkpoint_waits_for_the_commit() -> None:
    logs = {("t", 0): SourceLog()}
    pipeline, cluster, src, _ = setup(logs, transaction_interval_s=1000.0)
    state = start(pipeline, ("t", 0))
    run(pipeline, lambda: cluster.group.get(("t", 0)) == 0)  # the start offset, committed at once
    logs[("t", 0)].plain(4)
    src.logs = {("t", 0): logs[("t", 0)].raws}
    run(pipeline, lambda: state.tracker is not None and state.tracker.next_offset == 12)
    for _ in range(5):
        pipeline._step()
    assert state.checkpoint == 0 and cluster.committed_offsets(("t", 0)) == []
    done = pipeline.release(state)
    run(pipeline, done.is_set)
    assert state.checkpoint == 12 == cluster.group[("t", 0)]
    check_committed(cluster, logs)


def test_an_abortable_error_sends_the_partitions_back_to_their_checkpoints() -> None:
    logs = {("t", 0): SourceLog(), ("t", 1): SourceLog()}
    pipeline, cluster, src, _ = setup(logs)
    states = [start(pipeline, key) for key in logs]
    run(pipeline, lambda: cluster.group.get(("t", 0)) == 0 and cluster.group.get(("t", 1)) == 0)
    for log in logs.values():
        log.plain(6)
    src.logs = {k: v.raws for k, v in logs.items()}
    cluster.faults.append("abortable")
    run(pipeline, lambda: all(s.checkpoint == 18 for s in states))
    assert pipeline.aborts == 1 and all(s.error is None for s in states)
    assert any(t.status == "aborted" and t.writes for t in cluster.txns)
    check_committed(cluster, logs)


def test_a_fence_stops_every_partition_and_nothing_is_written_after() -> None:
    logs = {("t", 0): SourceLog(), ("t", 1): SourceLog()}
    for log in logs.values():
        log.plain(3)
    pipeline, cluster, src, _ = setup(logs)
    states = [start(pipeline, key) for key in logs]
    run(pipeline, lambda: all(s.checkpoint == 9 for s in states))
    for log in logs.values():
        log.plain(3)
    src.logs = {k: v.raws for k, v in logs.items()}
    cluster.faults.append("fenced")
    run(pipeline, lambda: all(s.error is not None for s in states))
    assert all(s.error is not None and s.error.startswith("fenced:") for s in states)
    assert all(s.checkpoint == 9 and not s.fetching for s in states)
    for _ in range(20):
        pipeline._step()
    assert cluster.writes_after_death == 0
    check_committed(cluster, logs)
    # A partition moved in from another pipeline is not taken back; a fresh assignment is.
    moved = start(pipeline, ("t", 0), 9, move=True)
    pipeline._step()
    assert moved.error is not None and moved.error.startswith("fenced:")
    fresh = start(pipeline, ("t", 1), cluster.checkpoint(("t", 1)))
    run(pipeline, lambda: fresh.checkpoint == 18)
    check_committed(cluster, logs)


@pytest.mark.parametrize("outcome", ["commit_lost", "commit_done"])
def test_a_commit_of_unknown_outcome_stops_the_partitions(outcome: str) -> None:
    logs = {("t", 0): SourceLog()}
    pipeline, cluster, src, _ = setup(logs)
    state = start(pipeline, ("t", 0))
    run(pipeline, lambda: cluster.group.get(("t", 0)) == 0)
    logs[("t", 0)].plain(4)
    src.logs = {("t", 0): logs[("t", 0)].raws}
    cluster.faults.append(outcome)
    run(pipeline, lambda: state.error is not None)
    assert state.error is not None and state.error.startswith("fenced:")
    assert state.checkpoint == 0  # the commit is not known to have happened
    # The worker restarts it from the destination's checkpoint with a new session.
    again = start(pipeline, ("t", 0), cluster.checkpoint(("t", 0)))
    run(pipeline, lambda: again.checkpoint == 12)
    check_committed(cluster, logs)
    assert cluster.committed_offsets(("t", 0)) == list(range(12))


def test_abandon_aborts_the_open_transaction() -> None:
    logs = {("t", 0): SourceLog()}
    pipeline, cluster, src, _ = setup(logs, transaction_interval_s=1000.0)
    state = start(pipeline, ("t", 0))
    run(pipeline, lambda: cluster.group.get(("t", 0)) == 0)  # the start offset, committed at once
    logs[("t", 0)].plain(4)
    src.logs = {("t", 0): logs[("t", 0)].raws}
    run(pipeline, lambda: state.tracker is not None and state.tracker.next_offset == 12)
    done = pipeline.abandon(state)
    assert done is not None
    run(pipeline, done.is_set)
    assert cluster.committed_offsets(("t", 0)) == [] and cluster.group[("t", 0)] == 0
    assert state.checkpoint == 0 and not state.fetching
    assert cluster.txns[-1].status == "aborted"


def test_hold_stops_fetching() -> None:
    logs = {("t", 0): SourceLog()}
    logs[("t", 0)].plain(2)
    pipeline, cluster, src, _ = setup(logs)
    state = start(pipeline, ("t", 0))
    run(pipeline, lambda: state.checkpoint == 6)
    pipeline.hold(True)
    logs[("t", 0)].plain(2)
    src.logs = {("t", 0): logs[("t", 0)].raws}
    fetches = src.fetches
    for _ in range(20):
        pipeline._step()
    assert state.checkpoint == 6 and src.fetches <= fetches + 1
    pipeline.hold(False)
    run(pipeline, lambda: state.checkpoint == 12)
    check_committed(cluster, logs)


def test_a_compacted_gap_hands_the_partition_to_record_mode() -> None:
    raws = [build(0, 3, codec=GZIP), build(5, 3, codec=GZIP)]  # offsets 3-4 compacted away
    cluster, clock = FakeCluster(), Clock()
    src = FakeSource({("t", 0): raws}, compacted=True)
    pipeline = TransactionalBatchPipeline(
        name="txb",
        source={},
        destination={},
        client_id="c",
        transactional_id=TXN_ID,
        checkpoint_group=GROUP,
        links=FakeLinks(src, clock),  # type: ignore[arg-type]
        session_factory=lambda link: FakeSession(cluster, TXN_ID),
        clock=clock,
    )
    state = start(pipeline, ("t", 0))
    run(pipeline, lambda: state.mode == "record")
    assert state.mode_reason.startswith("compacted_gap") and not state.fetching
    done = pipeline.release(state)
    run(pipeline, done.is_set)
    assert state.checkpoint == cluster.group[("t", 0)]
    assert cluster.committed_offsets(("t", 0)) == [o for o in range(state.checkpoint or 0)]


def test_stop_commits_what_is_open() -> None:
    logs = {("t", 0): SourceLog()}
    logs[("t", 0)].plain(3)
    pipeline, cluster, _, _ = setup(logs, transaction_interval_s=1000.0)
    pipeline.start()
    state = start(pipeline, ("t", 0))
    deadline = threading.Event()
    for _ in range(200):
        if state.tracker is not None and state.tracker.next_offset == 9:
            break
        deadline.wait(0.01)
    pipeline.stop(5.0)
    assert not pipeline.crashed()
    assert cluster.group[("t", 0)] == 9 and cluster.committed_offsets(("t", 0)) == list(range(9))


class Leased:
    """The worker's lease as the pipeline sees it: valid while ``on``."""

    def __init__(self, on: bool) -> None:
        self.on = on

    def __call__(self) -> bool:
        return self.on


def test_no_transactional_id_taken_and_nothing_written_without_the_lease() -> None:
    logs = {("t", 0): SourceLog()}
    logs[("t", 0)].plain(3)
    lease = Leased(False)
    pipeline, cluster, src, _ = setup(logs, lease=lease)
    state = start(pipeline, ("t", 0))
    for _ in range(30):
        pipeline._step()
    assert cluster.sessions == [] and cluster.txns == [] and src.fetches == 0
    assert state.checkpoint == 0 and ("t", 0) not in cluster.group
    lease.on = True
    run(pipeline, lambda: state.checkpoint == 9)
    assert len(cluster.sessions) == 1
    check_committed(cluster, logs)


def _open_transaction(
    lease: Leased,
) -> tuple[TransactionalBatchPipeline, FakeCluster, list[PartitionState], dict[Key, SourceLog]]:
    """Two partitions with 12 records each written into a transaction still open."""
    logs = {("t", 0): SourceLog(), ("t", 1): SourceLog()}
    pipeline, cluster, src, _ = setup(logs, transaction_interval_s=1000.0, lease=lease)
    states = [start(pipeline, key) for key in logs]
    run(pipeline, lambda: all(cluster.group.get(key) == 0 for key in logs))
    for log in logs.values():
        log.plain(4)
    src.logs = {k: v.raws for k, v in logs.items()}
    run(pipeline, lambda: all(s.tracker is not None and s.tracker.next_offset == 12 for s in states))
    return pipeline, cluster, states, logs


def test_an_open_transaction_commits_only_once_the_lease_is_confirmed_again() -> None:
    lease = Leased(True)
    pipeline, cluster, states, logs = _open_transaction(lease)
    lease.on = False
    released = pipeline.release(states[0])
    for _ in range(30):
        pipeline._step()
    assert not released.is_set() and cluster.txns[-1].status == "open"
    assert all(cluster.committed_offsets(key) == [] for key in logs)
    lease.on = True
    run(pipeline, released.is_set)
    assert cluster.group[("t", 0)] == 12 == states[0].checkpoint
    check_committed(cluster, logs)


def test_an_abandon_aborts_the_open_transaction_without_the_lease() -> None:
    lease = Leased(True)
    pipeline, cluster, states, logs = _open_transaction(lease)
    lease.on = False
    done = [pipeline.abandon(state) for state in states]
    run(pipeline, lambda: all(d is not None and d.is_set() for d in done))
    assert cluster.txns[-1].status == "aborted"
    assert all(cluster.group[key] == 0 and cluster.committed_offsets(key) == [] for key in logs)
    assert all(s.checkpoint == 0 and not s.fetching for s in states)


def test_a_fenced_id_is_not_taken_back_without_the_lease() -> None:
    logs = {("t", 0): SourceLog()}
    logs[("t", 0)].plain(2)
    lease = Leased(True)
    pipeline, cluster, src, _ = setup(logs, lease=lease)
    state = start(pipeline, ("t", 0))
    run(pipeline, lambda: state.checkpoint == 6)
    cluster.faults.append("fenced")
    logs[("t", 0)].plain(1)
    src.logs = {("t", 0): logs[("t", 0)].raws}
    run(pipeline, lambda: state.error is not None)
    lease.on = False
    again = start(pipeline, ("t", 0), cluster.checkpoint(("t", 0)))
    pipeline._step()
    assert again.error is not None and "without a confirmed lease" in again.error
    sessions = len(cluster.sessions)
    for _ in range(10):
        pipeline._step()
    assert len(cluster.sessions) == sessions and cluster.writes_after_death == 0
    lease.on = True
    fresh = start(pipeline, ("t", 0), cluster.checkpoint(("t", 0)))
    run(pipeline, lambda: fresh.checkpoint == 9)
    check_committed(cluster, logs)


# -- generated histories -------------------------------------------------------------------

KEYS: list[Key] = [("t", 0), ("t", 1), ("u", 0)]
OPS = ["step"] * 6 + ["append"] * 2 + ["add", "release", "abandon", "abortable", "fenced", "commit_lost", "commit_done"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_histories_keep_the_invariants(data: st.DataObject) -> None:
    logs = {key: SourceLog() for key in KEYS}
    for log in logs.values():
        log.plain(data.draw(st.integers(0, 3)))
    offset_map = data.draw(st.booleans())
    pipeline, cluster, src, _ = setup(
        logs,
        transaction_interval_s=data.draw(st.sampled_from([0.0, 0.05, 0.3])),
        transaction_linger_s=data.draw(st.sampled_from([0.0, 0.02, 1000.0])),
        offset_map=offset_map,
    )
    assigned: dict[Key, PartitionState] = {}
    waiting: list[tuple[Key, PartitionState, threading.Event]] = []

    def restart(key: Key) -> None:
        assigned[key] = start(pipeline, key, cluster.checkpoint(key))

    def check() -> None:
        check_committed(cluster, logs)
        assert cluster.writes_after_death == 0
        if offset_map:
            check_map(cluster, logs)
        for key, state in assigned.items():
            if state.checkpoint is not None:
                assert state.checkpoint <= cluster.group.get(key, 0), f"{key}: checkpoint past the committed one"

    for key in KEYS:
        if data.draw(st.booleans()):
            restart(key)
    for _ in range(data.draw(st.integers(5, 60))):
        op = data.draw(st.sampled_from(OPS))
        key = data.draw(st.sampled_from(KEYS))
        if op == "append":
            if data.draw(st.booleans()):
                # Uncompressed batches one after the other go out merged.
                logs[key].plain(data.draw(st.integers(1, 3)), codec=data.draw(st.sampled_from([GZIP, NONE])))
            else:
                logs[key].transaction(data.draw(st.integers(1, 2)), commit=data.draw(st.booleans()))
            src.logs = {k: v.raws for k, v in logs.items()}
            src.aborted = {k: v.aborted for k, v in logs.items()}
        elif op == "add" and key not in assigned and all(k != key for k, _, _ in waiting):
            restart(key)
        elif op in ("release", "abandon") and key in assigned:
            state = assigned.pop(key)
            done = pipeline.release(state) if op == "release" else pipeline.abandon(state)
            assert done is not None
            waiting.append((key, state, done))
        elif op in ("abortable", "fenced", "commit_lost", "commit_done"):
            cluster.faults = [op]
        else:
            for _ in range(data.draw(st.integers(1, 4))):
                pipeline._step()
        for item in list(waiting):
            k, state, done = item
            if done.is_set() or state.error is not None:
                waiting.remove(item)
                if state.error is None:
                    # Released after its commit, or abandoned after its abort: nothing of it is
                    # left to become visible past the checkpoint the next owner reads.
                    assert state.checkpoint == cluster.checkpoint(k)
        # The worker restarts a fenced partition from the destination's checkpoint.
        for k, state in list(assigned.items()):
            if state.error is not None:
                assert state.error.startswith("fenced:")
                restart(k)
        check()

    # Settle: no faults, everything assigned, run to the source end.
    cluster.faults = []
    for _ in range(400):
        pipeline._step()
        for item in list(waiting):
            if item[2].is_set() or item[1].error is not None:
                waiting.remove(item)
        if not waiting:
            break
    for key in KEYS:
        if key not in assigned or assigned[key].error is not None:
            restart(key)

    def caught_up() -> bool:
        for k, state in list(assigned.items()):
            if state.error is not None:
                restart(k)
        return all(assigned[k].checkpoint == logs[k].end == cluster.group.get(k) for k in KEYS)

    run(pipeline, caught_up, steps=2000)
    check()
    event(f"{pipeline.transactions} commits, {pipeline.aborts} aborts, {len(cluster.sessions)} sessions")
    for key, log in logs.items():
        assert cluster.committed_offsets(key) == log.data  # every record once, in order
        assert cluster.group[key] == log.end


def test_an_offset_gap_between_batches_hands_the_partition_to_record_mode() -> None:
    raws = [build(0, 3, codec=GZIP), build(5, 3, codec=GZIP)]  # offsets 3-4 gone, not compacted
    cluster, clock = FakeCluster(), Clock()
    src = FakeSource({("t", 0): raws})
    pipeline = TransactionalBatchPipeline(
        name="txb",
        source={},
        destination={},
        client_id="c",
        transactional_id=TXN_ID,
        checkpoint_group=GROUP,
        links=FakeLinks(src, clock),  # type: ignore[arg-type]
        session_factory=lambda link: FakeSession(cluster, TXN_ID),
        clock=clock,
    )
    state = start(pipeline, ("t", 0))
    run(pipeline, lambda: state.mode == "record")
    assert state.mode_reason.startswith("offset gap: 3..4")
    done = pipeline.release(state)
    run(pipeline, done.is_set)
    assert state.checkpoint == cluster.group[("t", 0)] == 3
    assert cluster.committed_offsets(("t", 0)) == [0, 1, 2]


def test_transaction_max_bytes_splits_a_backlog_into_transactions() -> None:
    logs = {("t", 0): SourceLog()}
    pipeline, cluster, src, _ = setup(logs, transaction_interval_s=1000.0, transaction_max_bytes=1, merge_bytes=0)
    state = start(pipeline, ("t", 0))
    run(pipeline, lambda: cluster.group.get(("t", 0)) == 0)
    logs[("t", 0)].plain(5)
    src.logs = {("t", 0): logs[("t", 0)].raws}
    run(pipeline, lambda: state.checkpoint == 15)
    written = [txn for txn in cluster.txns if txn.writes]
    assert len(written) == 5 and all(len(txn.writes) == 1 and txn.status == "committed" for txn in written)
    assert [txn.offsets[("t", 0)] for txn in written] == [3, 6, 9, 12, 15]
    check_committed(cluster, logs)


def test_a_caught_up_transaction_commits_once_it_lingered() -> None:
    logs = {("t", 0): SourceLog(), ("t", 1): SourceLog()}
    pipeline, cluster, src, clock = setup(logs, transaction_interval_s=1000.0, transaction_linger_s=0.02)
    states = [start(pipeline, key) for key in logs]
    run(pipeline, lambda: all(cluster.group.get(key) == 0 for key in logs))
    logs[("t", 0)].plain(4)
    src.logs = {k: v.raws for k, v in logs.items()}
    run(pipeline, lambda: states[0].tracker is not None and states[0].tracker.next_offset == 12)
    opened = clock.now
    run(pipeline, lambda: states[0].checkpoint == 12)
    # Long before the interval: both partitions had fetched everything the source held.
    assert clock.now - opened < 1.0
    assert cluster.group[("t", 0)] == 12 and cluster.group[("t", 1)] == 0
    check_committed(cluster, logs)


class BehindSource(FakeSource):
    """A source whose fetch answers say more is stable than they bring (as when an answer is
    cut at its size limit)."""

    def end(self, key: Key) -> int:
        return super().end(key) + 100


def test_a_transaction_with_more_to_fetch_waits_for_the_interval() -> None:
    logs = {("t", 0): SourceLog()}
    pipeline, cluster, _, clock = setup(logs, transaction_interval_s=0.5, transaction_linger_s=0.0)
    src = BehindSource({("t", 0): logs[("t", 0)].raws})
    pipeline._links.source = src  # type: ignore[union-attr]
    state = start(pipeline, ("t", 0))
    run(pipeline, lambda: cluster.group.get(("t", 0)) == 0)
    logs[("t", 0)].plain(4)
    run(pipeline, lambda: state.tracker is not None and state.tracker.next_offset == 12)
    written = clock.now
    run(pipeline, lambda: state.checkpoint == 12)
    assert clock.now - written >= 0.5 - 0.06  # the interval, less the steps it had begun before
    assert not pipeline._parts[("t", 0)].at_end
    check_committed(cluster, logs)


def test_the_next_batches_are_fetched_while_a_commit_waits() -> None:
    logs = {("t", 0): SourceLog()}
    pipeline, cluster, src, _ = setup(logs, transaction_interval_s=1000.0)
    state = start(pipeline, ("t", 0))
    run(pipeline, lambda: cluster.group.get(("t", 0)) == 0)
    logs[("t", 0)].plain(2)
    src.logs = {("t", 0): logs[("t", 0)].raws}
    run(pipeline, lambda: state.tracker is not None and state.tracker.next_offset == 6)
    logs[("t", 0)].plain(3)  # more on the source while the commit waits
    src.logs = {("t", 0): logs[("t", 0)].raws}
    fetches = src.fetches
    pipeline._commit()  # as the loop does once it is due
    part = pipeline._parts[("t", 0)]
    # Committed up to 6; the three batches after it came in during the commit, queued for the next.
    assert cluster.group[("t", 0)] == 6 and state.checkpoint == 6
    assert src.fetches > fetches and len(part.queue) == 3 and part.fetch_offset == 15
    run(pipeline, lambda: state.tracker is not None and state.tracker.next_offset == 15)
    pipeline._commit_soon = True
    run(pipeline, lambda: state.checkpoint == 15)
    check_committed(cluster, logs)


def test_small_uncompressed_batches_are_written_merged() -> None:
    logs = {("t", 0): SourceLog()}
    pipeline, cluster, src, _ = setup(logs, transaction_interval_s=1000.0)
    state = start(pipeline, ("t", 0))
    run(pipeline, lambda: cluster.group.get(("t", 0)) == 0)
    logs[("t", 0)].plain(6, codec=NONE)
    src.logs = {("t", 0): logs[("t", 0)].raws}
    run(pipeline, lambda: state.tracker is not None and state.tracker.next_offset == 18)
    done = pipeline.release(state)
    run(pipeline, done.is_set)
    written = [w for txn in cluster.txns for w in txn.writes]
    # Six source batches of three records, fetched together, went out as fewer batches.
    assert len(written) < 6 and sum(len(offsets) for _, offsets, _, _ in written) == 18
    assert state.checkpoint == 18 == cluster.group[("t", 0)]
    check_committed(cluster, logs)


def test_the_offset_map_runs_commit_in_the_transactions_of_their_batches() -> None:
    logs = {("t", 0): SourceLog(), ("t", 1): SourceLog()}
    pipeline, cluster, src, _ = setup(logs, transaction_interval_s=1000.0, offset_map=True)
    states = [start(pipeline, key) for key in logs]
    run(pipeline, lambda: all(cluster.group.get(key) == 0 for key in logs))
    logs[("t", 0)].plain(4, codec=NONE)  # merged into fewer batches: one run still
    logs[("t", 1)].transaction(2, commit=True)  # the source's marker breaks the run
    logs[("t", 1)].plain(1)
    src.logs = {k: v.raws for k, v in logs.items()}
    ends = [log.end for log in logs.values()]
    run(pipeline, lambda: [s.tracker.next_offset if s.tracker else None for s in states] == ends)
    pipeline._commit_soon = True
    run(pipeline, lambda: [s.checkpoint for s in states] == ends)
    committed = [txn for txn in cluster.txns if txn.status == "committed" and txn.writes]
    map_key = (map_topic("r"), 0)
    assert all(map_key in {w[0] for w in txn.writes} for txn in committed)
    check_map(cluster, logs)
    # An aborted transaction's runs are never visible, and the next one maps the copy again.
    logs[("t", 0)].plain(2)
    src.logs = {k: v.raws for k, v in logs.items()}
    run(pipeline, lambda: states[0].tracker is not None and states[0].tracker.next_offset == logs[("t", 0)].end)
    cluster.faults = ["abortable"]
    run(pipeline, lambda: pipeline.aborts == 1)
    pipeline._commit_soon = True
    run(pipeline, lambda: states[0].checkpoint == logs[("t", 0)].end)
    assert any(txn.status == "aborted" and txn.writes for txn in cluster.txns)
    check_map(cluster, logs)
    assert pipeline._map is not None and pipeline._map.published >= 3 and pipeline._map.failures == 0
