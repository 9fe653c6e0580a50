"""The Kafka backend of the coordination store: everything on one Kafka cluster, no ZooKeeper.

Two compacted topics (one partition each, so one log order), read back by one background
reader into views (strait.coordination.views); a watch is a callback on a change of the view:

    <prefix>.state   leader                      {"id", "api_url", "term", "session"}, written by
                                                 the leader's transactional producer
                     topic/<route>/<topic>       TopicSpec
                     removed/<route>/<topic>     marker: patterns must not re-add this topic
                     assignment                  manifest {"gen", "partitions", "workers"}; gen is
                                                 the compare-and-set version
                     assignment/worker/<id>[/i]  {"gen", "more", "p": encode_keys ranges}, split
                     assignment/unowned[/i]      as in strait.coordination.split (pieces 1..more)
    <prefix>.live    leader/<session>            {"term"}: a leader's heartbeat
                     worker/<id>                 WorkerRecord + "session": the worker's heartbeat
                     stats/<id>                  copy statistics (strait.coordination.stats)
                     known/<id>                  last lifecycle state, pool and time of a worker
                     drain/<id>                  drain request

The live topic is never written in a transaction: a leader frozen inside one holds back the
state topic's readers (read_committed stops at its first record) until the next leader's
`init_transactions` aborts it, and that must not hide any worker's heartbeat or record.

Leadership and fencing: every leader write to the state topic (the leader record, assignments,
the leader's topic changes) is a transaction of one producer whose `transactional.id` is
`strait-coordination.<prefix>.leader`. A new leader's `init_transactions` fences the previous
holder's epoch, so a deposed or frozen leader's later commit is refused by the broker, whatever
it believes; the topics are read `read_committed`, so a refused or aborted write is never seen.

Liveness: heartbeat records, judged by the reader's own clock (a heartbeat counts from when the
reader read it, so writers' clocks do not matter once the reader has caught up). A writer
rewrites its heartbeats every quarter of `session_timeout_s`; a reader that has read none for
`session_timeout_s` judges the writer gone. Group membership was the other choice: it needs
the broker's `group.min.session.timeout.ms` (6 s by default) at or below Strait's 4 s session,
a rebalance protocol of its own, and a DescribeGroups poll to learn what heartbeats tell
directly; heartbeats work on any broker configuration with one producer and one reader.

Session: this store's own session is its last successful round trip (heartbeats acknowledged
and the reader caught up with the log end), suspended after half the session timeout without
one and lost after all of it, when every reader has judged its heartbeats stale; a lost session
ends this store's worker registrations (a worker registers again) and its leadership.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic, OffsetSpec  # type: ignore[attr-defined]  # re-exports not in __all__

from strait import clients
from strait.coordination.model import (
    Assignment,
    ClusterSnapshot,
    LeaderInfo,
    PartitionKey,
    SessionState,
    TopicSpec,
    WorkerRecord,
    decode_keys,
    encode_keys,
    split_encoded,
)
from strait.coordination.stats import StatsGatherer
from strait.coordination.store import StoreUnavailable, WorkerIdTaken
from strait.coordination.views import SessionClock, View, arrival, encode, fresh

log = logging.getLogger(__name__)

# One record of an assignment piece stays well under the default max.message.bytes (1 MB).
CHUNK_BYTES = 256 * 1024
_TORN_READ_TRIES = 20
_UNOWNED = "unowned"
# Keys of the live topic; every other key is in the state topic.
# How long start() keeps trying while the cluster cannot answer (its KRaft controller busy or
# moving): a controller or worker restarted during such a moment waits instead of exiting.
START_TIMEOUT_S = 30.0
_START_RETRY_S = 1.0
# Errors of CreateTopics that pass: the cluster is there, only slow or between controllers.
_TRANSIENT = {
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NOT_CONTROLLER,
}

_LIVE_KEYS = ("leader/", "worker/", "stats/", "known/", "drain/")
# Names of the transactional id and the group, under one prefix the ACLs grant.
NAME_PREFIX = "strait-coordination"


def leader_transactional_id(prefix: str) -> str:
    """The one transactional id every leader of the fleet on `prefix` writes with."""
    return f"{NAME_PREFIX}.{prefix}.leader"


def reader_group(prefix: str) -> str:
    """The readers' group.id: librdkafka wants one; nothing joins it or commits to it."""
    return f"{NAME_PREFIX}.{prefix}.reader"


def assignment_key(name: str | None, piece: int = 0) -> str:
    """The state key of a worker's assignment (None: the unowned partitions), piece 0 the head."""
    base = f"assignment/{_UNOWNED}" if name is None else f"assignment/worker/{name}"
    return base if piece == 0 else f"{base}/{piece}"


def assignment_records(
    current: Mapping[str | None, tuple[frozenset[PartitionKey], int]],
    owners: Mapping[PartitionKey, str | None],
    gen: int,
) -> list[tuple[str, dict[str, Any] | None]]:
    """The records (key, value; None deletes) that publish `owners` as generation `gen`, given
    each name's current partitions and piece count (`more`).

    Every name that loses partitions is written first without them, then every name that gains,
    so a reader applying the records one by one never sees a partition under two workers. A name
    is written pieces first, head last (a reader checks the pieces' gen against the head's)."""
    desired: dict[str | None, set[PartitionKey]] = {}
    for key, worker in owners.items():
        desired.setdefault(worker, set()).add(key)
    names = sorted(set(desired) | set(current), key=lambda n: (n is not None, n or ""))
    stage = {name: current.get(name, (frozenset(), 0))[0] for name in names}
    more = {name: current.get(name, (frozenset(), 0))[1] for name in names}
    records: list[tuple[str, dict[str, Any] | None]] = []

    def write(name: str | None, keys: frozenset[PartitionKey]) -> None:
        pieces = split_encoded(encode_keys(keys), CHUNK_BYTES)
        for i, piece in enumerate(pieces[1:], 1):
            records.append((assignment_key(name, i), {"gen": gen, "p": piece}))
        records.append((assignment_key(name), {"gen": gen, "more": len(pieces) - 1, "p": pieces[0]}))
        records.extend((assignment_key(name, i), None) for i in range(len(pieces), more[name] + 1))
        stage[name], more[name] = keys, len(pieces) - 1

    for name in names:
        have, want = stage[name], frozenset(desired.get(name, ()))
        if have - want:
            write(name, have & want)
    for name in names:
        want = frozenset(desired.get(name, ()))
        if want != stage[name] or (want and name not in current):
            write(name, want)
    return records


class KafkaStore:
    """`CoordinationStore` on a Kafka cluster (see the module docstring for the layout)."""

    def __init__(
        self,
        *,
        props: Mapping[str, Any],
        prefix: str = "__strait",
        session_timeout_s: float = 4.0,
    ) -> None:
        self._props = dict(props)
        self._timeout_s = session_timeout_s
        self._state_topic = f"{prefix}.state"
        self._live_topic = f"{prefix}.live"
        self._transactional_id = leader_transactional_id(prefix)
        self._session = uuid.uuid4().hex
        self._clock = SessionClock(session_timeout_s)
        self._state = SessionState.LOST
        self._listeners: list[Callable[[SessionState], None]] = []
        # Guards the views, the positions and the watch lists; the reader notifies on progress.
        self._cond = threading.Condition()
        self._views = {self._state_topic: View(), self._live_topic: View()}
        self._positions = {self._state_topic: 0, self._live_topic: 0}
        # The offsets of this store's own acknowledged writes: a read waits until they are in view.
        self._written = {self._state_topic: -1, self._live_topic: -1}
        self._written_lock = threading.Lock()
        self._caught_up = False
        self._cluster_watches: list[Callable[[], None]] = []
        self._assignment_watches: list[Callable[[Assignment], None]] = []
        self._worker_watches: list[tuple[str, Callable[[Assignment], None]]] = []
        self._drain_watches: list[tuple[str, Callable[[bool], None]]] = []
        self._live_seen: frozenset[str] = frozenset()
        self._owned: dict[str, WorkerRecord] = {}  # worker records this store heartbeats
        self._leading: int | None = None  # the term this store leads in, while it believes it leads
        self._leader_producer: Any = None
        self._write_lock = threading.Lock()  # one leader transaction at a time
        self._last_ok = time.monotonic()
        # Orders reading the silence against the beat loop's ending of it: once `session_state`
        # said LOST, the listeners hear LOST too, even if the round trip in flight goes through.
        self._ok_lock = threading.Lock()
        self._stop = threading.Event()
        # Watches run on a thread of their own: they may read the store, which waits on the reader.
        self._events: queue.Queue[tuple[Callable[..., Any], tuple[Any, ...]]] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._gatherer: StatsGatherer | None = None
        self._admin = clients.admin(self._props)
        self._admin_lock = threading.Lock()
        self._producer = clients.producer(self._props, **{"enable.idempotence": True, "linger.ms": 0})
        self._consumer = clients.consumer(
            self._props,
            **{
                "group.id": reader_group(prefix),
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                "fetch.wait.max.ms": 50,
            },
        )

    # --- session -------------------------------------------------------------------------
    def start(self) -> None:
        started = time.monotonic()
        while not self._ensure_topics(last=time.monotonic() - started >= START_TIMEOUT_S):
            time.sleep(_START_RETRY_S)
        self._consumer.assign([TopicPartition(t, 0, 0) for t in self._views])
        for target, name in ((self._read, "reader"), (self._dispatch, "watches")):
            thread = threading.Thread(target=target, name=f"strait-coordination-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        deadline = started + max(START_TIMEOUT_S, self._timeout_s)
        while True:
            try:
                self._sync(max(1.0, min(deadline - time.monotonic(), 2 * self._timeout_s)))
                break
            except StoreUnavailable as exc:
                # Topics just created have no leader for a moment; a busy cluster answers late.
                if time.monotonic() > deadline:
                    raise
                log.warning("coordination store not read to its end yet (%s); trying again", exc)
                time.sleep(0.1)
        with self._cond:
            self._caught_up = True
        self._last_ok = time.monotonic()
        self._state = SessionState.CONNECTED
        beater = threading.Thread(target=self._beat_loop, name="strait-coordination-heartbeat", daemon=True)
        beater.start()
        self._threads.append(beater)

    def _ensure_topics(self, *, last: bool = True) -> bool:
        """Create the coordination topics if missing; False after a transient error when this
        is not the ``last`` try (the caller tries again), StoreUnavailable otherwise."""
        topics = [
            NewTopic(self._state_topic, 1, -1, config={"cleanup.policy": "compact"}),
            # Heartbeats rewrite the same keys every second: small segments let compaction keep up.
            NewTopic(
                self._live_topic,
                1,
                -1,
                config={"cleanup.policy": "compact", "segment.ms": "60000", "min.cleanable.dirty.ratio": "0.1"},
            ),
        ]
        futures = self._admin.create_topics(topics, operation_timeout=10, request_timeout=max(5.0, self._timeout_s))
        for name, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                code = exc.args[0].code()
                if code == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                if code in _TRANSIENT and not last:
                    log.warning("coordination topic %s not created yet (%s); trying again", name, exc)
                    return False
                raise StoreUnavailable(f"cannot create the coordination topic {name}: {exc}") from exc
        return True

    def close(self) -> None:
        with contextlib.suppress(Exception):  # best effort: heartbeats stop either way
            self.release_leadership()
            for worker_id in list(self._owned):
                self._produce(self._live_topic, f"worker/{worker_id}", None)
        self._owned.clear()
        self._stop.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)
        if self._gatherer is not None:
            self._gatherer.close()
        with contextlib.suppress(Exception):  # best effort: heartbeats stop either way
            self._producer.flush(2)
        for client in (self._consumer, self._leader_producer):
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()

    def session_state(self) -> SessionState:
        with self._ok_lock:
            silent = self._silent_too_long(time.monotonic())
        if self._state is not SessionState.LOST and silent:
            return SessionState.LOST  # frozen past the timeout: the beat loop has not noticed yet
        return self._state

    def _end_a_silent_session(self, now: float) -> None:
        """Woken from a freeze past the timeout, the session ended meanwhile (the leader may have
        fenced this worker and given its partitions away), even if the next heartbeat goes
        through: say so to the listeners before anything acts on the old session. A new
        session starts with the next successful round trip."""
        if self._state is not SessionState.LOST and self._silent_too_long(now):
            self._set_state(SessionState.LOST)

    def _silent_too_long(self, now: float) -> bool:
        """No round trip for a whole session timeout: every reader has judged our heartbeats
        stale, whether the cluster was unreachable or this process was frozen (SIGSTOP, a VM
        pause) and so sent nothing."""
        return self._clock.state(self._last_ok, now) is SessionState.LOST

    def on_session_change(self, listener: Callable[[SessionState], None]) -> None:
        self._listeners.append(listener)

    def _set_state(self, state: SessionState) -> None:
        if state is self._state:
            return
        if state is not SessionState.CONNECTED:
            self._leading = None  # in doubt: stop leader work now
        if state is SessionState.LOST:
            # Every reader has judged our heartbeats stale: the registrations and the session end.
            self._owned.clear()
            self._session = uuid.uuid4().hex
        self._state = state
        log.info("Kafka coordination session %s", state.value)
        for listener in list(self._listeners):
            try:
                listener(state)
            except Exception:
                log.exception("session listener failed")

    def _beat_loop(self) -> None:
        interval = self._timeout_s / 4
        while not self._stop.wait(interval):
            started = time.monotonic()
            self._end_a_silent_session(started)
            try:
                self._beat()
                self._sync(interval * 1.5)
            except Exception as exc:
                log.debug("coordination heartbeat failed: %s", exc)
                self._set_state(self._clock.state(self._last_ok, time.monotonic()))
                continue
            with self._ok_lock:
                outlasted = self._state is not SessionState.LOST and self._silent_too_long(time.monotonic())
                if not outlasted:
                    self._last_ok = started
            if outlasted:
                # It went through, but only after every reader had judged the session stale.
                self._set_state(SessionState.LOST)
                continue
            self._set_state(SessionState.CONNECTED)

    def _beat(self) -> None:
        if self._state is SessionState.LOST:
            return  # a new session starts with the next successful round trip
        term = self._leading
        if term is not None and self._leads_in_view():
            self._produce(self._live_topic, f"leader/{self._session}", {"term": term})
        for record in list(self._owned.values()):
            self._produce(self._live_topic, f"worker/{record.id}", self._worker_value(record))
        self._flush(self._timeout_s / 4)

    # --- reading -------------------------------------------------------------------------
    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                messages = self._consumer.consume(500, 0.1)
            except Exception:
                log.debug("coordination reader poll failed", exc_info=True)
                time.sleep(0.1)
                continue
            now, wall = time.monotonic(), time.time()
            changed: set[tuple[str, str]] = set()
            with self._cond:
                for message in messages:
                    if message.error() is not None:
                        continue
                    topic, raw_key = message.topic(), message.key()
                    if topic not in self._views or raw_key is None:
                        continue
                    key = raw_key.decode() if isinstance(raw_key, bytes) else str(raw_key)
                    _, ts_ms = message.timestamp()
                    arrived = arrival(now, wall, ts_ms / 1000 if ts_ms > 0 else None, self._caught_up)
                    value = message.value()
                    if self._views[topic].apply(
                        key, value if isinstance(value, bytes | None) else value.encode(), arrived
                    ):
                        changed.add((topic, key))
                with contextlib.suppress(Exception):
                    for tp in self._consumer.position([TopicPartition(t, 0) for t in self._views]):
                        if tp.offset >= 0:
                            self._positions[tp.topic] = tp.offset
                live = self._live_ids(now)
                turned = live ^ self._live_seen
                self._live_seen = live
                self._cond.notify_all()
            if changed or turned:
                self._notify(changed, bool(turned))

    def _notify(self, changed: set[tuple[str, str]], liveness_changed: bool) -> None:
        state_keys = {k for t, k in changed if t == self._state_topic}
        live_keys = {k for t, k in changed if t == self._live_topic}
        cluster = liveness_changed or any(k == "leader" or k.startswith("topic/") for k in state_keys)
        cluster = cluster or any(k.startswith(("worker/", "leader/", "drain/", "known/")) for k in live_keys)
        if cluster:
            for callback in list(self._cluster_watches):
                self._call_watch(callback)
        if "assignment" in state_keys:
            for on_assignment in list(self._assignment_watches):
                self._call_watch(on_assignment, Assignment())
        for worker_id, on_worker in list(self._worker_watches):
            if assignment_key(worker_id) in state_keys:
                self._call_watch(on_worker, Assignment())
        for worker_id, on_drain in list(self._drain_watches):
            if f"drain/{worker_id}" in live_keys:
                self._call_watch(on_drain, self._view(self._live_topic).get(f"drain/{worker_id}") is not None)

    def _call_watch(self, callback: Callable[..., Any], *args: Any) -> None:
        self._events.put((callback, args))

    def _dispatch(self) -> None:
        while not self._stop.is_set():
            try:
                callback, args = self._events.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                callback(*args)
            except Exception:
                log.exception("coordination watch failed")

    def _view(self, topic: str) -> View:
        return self._views[topic]

    def _live_ids(self, now: float) -> frozenset[str]:
        return frozenset(
            worker_id
            for worker_id, entry in self._views[self._live_topic].under("worker/")
            if fresh(entry, now, self._timeout_s)
        )

    def _end_offsets(self, timeout_s: float) -> dict[str, int]:
        admin = self._admin  # held until its answers are in, whatever replaces it meanwhile
        request = {TopicPartition(t, 0): OffsetSpec.latest() for t in self._views}  # type: ignore[no-untyped-call]
        try:
            futures = admin.list_offsets(
                request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s
            )
            return {
                tp.topic: clients.admin_result(f, timeout_s, "coordination end offsets").offset
                for tp, f in futures.items()
            }
        except Exception:
            # librdkafka's admin client can keep a partition leader's stale epoch after that
            # broker restarted, and then every answer is FENCED_LEADER_EPOCH: a fresh client
            # with fresh metadata is the way out (after a timeout too: the old one may wait on a dead broker).
            with self._admin_lock:
                if self._admin is admin:
                    self._admin = clients.admin(self._props)
            raise

    def _sync(self, timeout_s: float | None = None) -> None:
        """Wait until the views hold everything committed before now (read-your-writes)."""
        timeout_s = self._timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        try:
            ends = self._end_offsets(timeout_s)
        except Exception as exc:
            raise StoreUnavailable(f"coordinating Kafka cluster unavailable: {exc}") from exc
        with self._written_lock:
            # A transaction's commit returns before its markers are written, so the end offset
            # (the last stable offset) may not cover it yet: wait for our own writes too.
            ends = {t: max(end, self._written[t] + 1) for t, end in ends.items()}
        with self._cond:
            while any(self._positions[t] < end for t, end in ends.items()):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreUnavailable("coordinating Kafka cluster unavailable: the reader fell behind")
                self._cond.wait(left)

    # --- writing -------------------------------------------------------------------------
    def _delivered(self, error: Any, message: Any) -> None:
        if error is None and message.topic() in self._written:
            with self._written_lock:
                self._written[message.topic()] = max(self._written[message.topic()], message.offset())

    def _produce(self, topic: str, key: str, value: Mapping[str, Any] | None, producer: Any = None) -> None:
        (producer or self._producer).produce(
            topic,
            key=key.encode(),
            value=None if value is None else encode(dict(value)),
            on_delivery=self._delivered,
        )

    def _flush(self, timeout_s: float | None = None) -> None:
        left = self._producer.flush(self._timeout_s if timeout_s is None else timeout_s)
        if left:
            raise StoreUnavailable(f"coordinating Kafka cluster unavailable: {left} records not acknowledged")

    def _topic_of(self, key: str) -> str:
        return self._live_topic if key.startswith(_LIVE_KEYS) else self._state_topic

    def _write(self, records: Iterable[tuple[str, Mapping[str, Any] | None]]) -> None:
        """Writes anyone may make (topics by the API, drain requests, known workers). State keys go
        through the leader's transaction while this store leads, so a deposed leader's are refused;
        the live topic is never written in a transaction, whose markers a frozen leader could hold
        back from every reader."""
        records = list(records)
        state = [(k, v) for k, v in records if self._topic_of(k) == self._state_topic]
        if state and self._leading is not None:
            if not self._commit(state):
                raise StoreUnavailable("this controller's leadership ended: its write is refused")
            state = []
        for key, value in state:
            self._produce(self._state_topic, key, value)
        for key, value in records:
            if self._topic_of(key) == self._live_topic:
                self._produce(self._live_topic, key, value)
        self._flush()
        self._sync()

    def _commit(self, records: list[tuple[str, Mapping[str, Any] | None]]) -> bool:
        """One transaction of the leader's producer; False (and no longer leading) when refused."""
        with self._write_lock:
            producer = self._leader_producer
            if producer is None:
                return False
            try:
                producer.begin_transaction()
                for key, value in records:
                    self._produce(self._state_topic, key, value, producer)
                producer.commit_transaction(self._timeout_s)
            except KafkaException as exc:
                error = exc.args[0]
                log.warning("leader write refused (%s): no longer leading", error)
                self._leading = None
                if error.txn_requires_abort() and not error.fatal():
                    with contextlib.suppress(KafkaException):
                        producer.abort_transaction(self._timeout_s)
                if error.fatal() or error.code() == KafkaError._FENCED:
                    # Dropped, not closed: closing would try to abort what the broker already ended.
                    self._leader_producer = None
                    return False
                if error.retriable():
                    raise StoreUnavailable(f"coordinating Kafka cluster unavailable: {error}") from exc
                return False
        return True

    def _drop_leader_producer(self) -> None:
        producer, self._leader_producer = self._leader_producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.close()

    # --- controller ----------------------------------------------------------------------
    def _leader_record(self) -> dict[str, Any] | None:
        record = self._view(self._state_topic).get("leader")
        return None if record is None or record.get("released") else record

    def _leader_alive(self, record: Mapping[str, Any]) -> bool:
        beat = self._view(self._live_topic).entry(f"leader/{record.get('session')}")
        return fresh(beat, time.monotonic(), self._timeout_s)

    def attempt_to_acquire_leadership(self, leader: LeaderInfo) -> bool:
        if self._state is not SessionState.CONNECTED:
            return False
        self._sync()
        current = self._view(self._state_topic).get("leader") or {}
        ours = current.get("session") == self._session and not current.get("released")
        if ours and self._leader_producer is not None:
            # Ours from before a brief doubt: no one else has written a leader record since.
            self._leading = int(current.get("term", 0))
            return True
        if not current.get("released") and current and self._leader_alive(current):
            return False
        term = int(current.get("term", 0)) + 1
        with self._write_lock:
            self._drop_leader_producer()
            producer = clients.producer(
                self._props,
                **{"transactional.id": self._transactional_id, "transaction.timeout.ms": int(self._timeout_s * 2500)},
            )
            try:
                # Fences the previous leader: its next commit is refused by the broker.
                producer.init_transactions(max(10.0, self._timeout_s * 2))
            except KafkaException as exc:
                with contextlib.suppress(Exception):
                    producer.close()
                raise StoreUnavailable(f"cannot take the leader's transactional id: {exc}") from exc
            self._leader_producer = producer
        self._leading = term
        record = {"id": leader.id, "api_url": leader.api_url, "term": term, "session": self._session}
        if not self._commit([("leader", record)]):
            return False
        self._produce(self._live_topic, f"leader/{self._session}", {"term": term})
        self._flush()
        self._sync()
        return self.holds_leadership()

    def holds_leadership(self) -> bool:
        if self._leading is None or self._state is not SessionState.CONNECTED:
            return False
        if time.monotonic() - self._last_ok >= self._timeout_s / 2:
            return False  # no round trip for half the session (the heartbeat thread stalled with us)
        return self._leads_in_view()

    def _leads_in_view(self) -> bool:
        record = self._view(self._state_topic).get("leader")
        return record is not None and record.get("session") == self._session and not record.get("released")

    def leader(self) -> LeaderInfo | None:
        record = self._leader_record()
        if record is None or not (record.get("session") == self._session or self._leader_alive(record)):
            return None
        return LeaderInfo(id=str(record.get("id", "")), api_url=str(record.get("api_url", "")))

    def release_leadership(self) -> None:
        term = self._leading
        if term is None:
            return
        with contextlib.suppress(StoreUnavailable):
            if self._commit([("leader", {"term": term, "released": True})]):
                self._sync()
        self._leading = None
        self._drop_leader_producer()
        self._produce(self._live_topic, f"leader/{self._session}", None)
        self._producer.poll(0)

    def watch_cluster(self, on_change: Callable[[], None]) -> None:
        with self._cond:
            self._cluster_watches.append(on_change)
        on_change()

    def snapshot(self) -> ClusterSnapshot:
        self._sync()
        now = time.monotonic()
        with self._cond:
            state, live = self._view(self._state_topic), self._view(self._live_topic)
            topics = {
                (route, topic): TopicSpec.from_json(route, topic, entry.value)
                for route, topic, entry in _route_topics(state, "topic/")
            }
            removed = frozenset((route, topic) for route, topic, _ in _route_topics(state, "removed/"))
            drains = {worker_id for worker_id, _ in live.under("drain/")}
            workers: dict[str, WorkerRecord] = {}
            for worker_id, entry in live.under("known/"):
                workers[worker_id] = WorkerRecord.gone(worker_id, entry.value, drain=worker_id in drains)
            live_ids = self._live_ids(now)
            for worker_id, entry in live.under("worker/"):
                if worker_id in live_ids:
                    workers[worker_id] = WorkerRecord.from_json(
                        worker_id, entry.value, live=True, drain=worker_id in drains
                    )
            stats: dict[str, Any] = {w: e.value for w, e in live.under("stats/") if w in live_ids}
        if any("stats_url" in report for report in stats.values()):
            if self._gatherer is None:
                self._gatherer = StatsGatherer()
            stats = self._gatherer.merge(stats)
        return ClusterSnapshot(
            topics=topics,
            removed=removed,
            workers=workers,
            stats=stats,
            assignment=self._assignment(),
            leader=self.leader(),
        )

    def write_assignment(self, owners: Mapping[PartitionKey, str | None], version: int) -> bool:
        if not self.holds_leadership():
            return False
        self._sync()
        current = self._assignment_heads()
        manifest = self._view(self._state_topic).get("assignment") or {}
        if int(manifest.get("gen", 0)) != version:
            return False
        gen = version + 1
        records: list[tuple[str, Mapping[str, Any] | None]] = list(assignment_records(current, owners, gen))
        records.append(
            (
                "assignment",
                {"gen": gen, "partitions": len(owners), "workers": len({w for w in owners.values() if w is not None})},
            )
        )
        if not self._commit(records):
            return False
        self._sync()
        return True

    def create_topic(self, spec: TopicSpec) -> TopicSpec | None:
        self._sync()
        existing = self._view(self._state_topic).get(f"topic/{spec.route}/{spec.topic}")
        if existing is not None:
            return TopicSpec.from_json(spec.route, spec.topic, existing)
        # An explicit add lifts the "removed" mark, so patterns may pick the topic up again.
        self._write(
            [(f"topic/{spec.route}/{spec.topic}", spec.to_json()), (f"removed/{spec.route}/{spec.topic}", None)]
        )
        return None

    def update_topic(self, spec: TopicSpec) -> None:
        self._sync()
        if self._view(self._state_topic).get(f"topic/{spec.route}/{spec.topic}") is None:
            return  # removed meanwhile: the removal wins
        self._write([(f"topic/{spec.route}/{spec.topic}", spec.to_json())])

    def delete_topic(self, route: str, topic: str) -> bool:
        self._sync()
        existed = self._view(self._state_topic).get(f"topic/{route}/{topic}") is not None
        self._write([(f"removed/{route}/{topic}", {}), (f"topic/{route}/{topic}", None)])
        return existed

    def request_drain(self, worker_id: str) -> None:
        self._write([(f"drain/{worker_id}", {})])

    def forget_worker(self, worker_id: str) -> None:
        self._sync()
        if worker_id in self._live_ids(time.monotonic()):
            return  # back meanwhile
        records: list[tuple[str, Mapping[str, Any] | None]] = [
            (f"known/{worker_id}", None),
            (f"drain/{worker_id}", None),
        ]
        head = self._view(self._state_topic).get(assignment_key(worker_id))
        if self.holds_leadership() and head is not None and not head.get("p") and not head.get("more"):
            records.insert(0, (assignment_key(worker_id), None))
        self._write(records)

    # --- worker --------------------------------------------------------------------------
    def _worker_value(self, record: WorkerRecord) -> dict[str, Any]:
        return {**record.to_json(), "session": self._session}

    def register_worker(self, record: WorkerRecord) -> None:
        if self._state is SessionState.LOST:
            raise StoreUnavailable("the coordination session is lost")
        self._sync()
        entry = self._view(self._live_topic).entry(f"worker/{record.id}")
        if (
            entry is not None
            and entry.value.get("session") != self._session
            and fresh(entry, time.monotonic(), self._timeout_s)
        ):
            raise WorkerIdTaken(f"worker id {record.id!r} is registered by another live session")
        self._owned[record.id] = record
        self._produce(self._live_topic, f"worker/{record.id}", self._worker_value(record))
        self._write_known(record)

    def update_worker(self, record: WorkerRecord) -> None:
        if record.id not in self._owned:
            raise StoreUnavailable(f"worker {record.id!r} is no longer registered (session lost)")
        self._owned[record.id] = record
        self._produce(self._live_topic, f"worker/{record.id}", self._worker_value(record))
        self._write_known(record)

    def deregister_worker(self, record: WorkerRecord) -> None:
        self._owned.pop(record.id, None)
        for key in (f"worker/{record.id}", f"stats/{record.id}"):
            self._produce(self._live_topic, key, None)
        self._write([(f"known/{record.id}", self._known_value(record)), (f"drain/{record.id}", None)])

    def _known_value(self, record: WorkerRecord) -> dict[str, Any]:
        return {
            "state": record.state.value,
            "host": record.host,
            "pid": record.pid,
            "pool": record.pool,
            "updated": time.time(),
        }

    def _write_known(self, record: WorkerRecord) -> None:
        self._write([(f"known/{record.id}", self._known_value(record))])

    def publish_stats(self, worker_id: str, stats: Mapping[str, Any]) -> None:
        self._produce(self._live_topic, f"stats/{worker_id}", stats)
        self._producer.poll(0)

    def watch_assignment(self, on_change: Callable[[Assignment], None]) -> None:
        with self._cond:
            self._assignment_watches.append(on_change)
        on_change(Assignment())

    def watch_worker_assignment(self, worker_id: str, on_change: Callable[[Assignment], None]) -> None:
        with self._cond:
            self._worker_watches.append((worker_id, on_change))
        on_change(Assignment())

    def read_worker_assignment(self, worker_id: str) -> Assignment:
        self._sync()
        keys, gen = self._read_piecewise(worker_id)
        return Assignment(owners=dict.fromkeys(keys, worker_id), version=gen)

    def read_assignment(self) -> Assignment:
        self._sync()
        return self._assignment()

    def _assignment(self) -> Assignment:
        owners: dict[PartitionKey, str | None] = {}
        for name, (keys, _) in self._assignment_heads().items():
            owners.update(dict.fromkeys(keys, name))
        manifest = self._view(self._state_topic).get("assignment") or {}
        return Assignment(owners=owners, version=int(manifest.get("gen", 0)))

    def _assignment_heads(self) -> dict[str | None, tuple[frozenset[PartitionKey], int]]:
        names: list[str | None] = [None]
        names += [rest for rest, _ in self._view(self._state_topic).under("assignment/worker/") if "/" not in rest]
        heads: dict[str | None, tuple[frozenset[PartitionKey], int]] = {}
        for name in names:
            keys, _ = self._read_piecewise(name)
            head = self._view(self._state_topic).get(assignment_key(name))
            if head is not None:
                heads[name] = (keys, int(head.get("more", 0)))
        return heads

    def _read_piecewise(self, name: str | None) -> tuple[frozenset[PartitionKey], int]:
        """A head and its pieces, all of one generation (the reader may be between records of
        one publish: it catches up within moments)."""
        for _ in range(_TORN_READ_TRIES):
            with self._cond:
                state = self._view(self._state_topic)
                head = state.get(assignment_key(name))
                if head is None:
                    return frozenset(), 0
                gen, more = int(head.get("gen", 0)), int(head.get("more", 0))
                pieces = [head] + [state.get(assignment_key(name, i)) or {} for i in range(1, more + 1)]
                if all(int(p.get("gen", -1)) == gen for p in pieces):
                    return decode_keys(e for p in pieces for e in p.get("p", [])), gen
            time.sleep(0.05)
        raise StoreUnavailable(f"the assignment of {name or 'unowned partitions'} stayed torn")

    def topics(self) -> dict[tuple[str, str], TopicSpec]:
        self._sync()
        with self._cond:
            return {
                (route, topic): TopicSpec.from_json(route, topic, entry.value)
                for route, topic, entry in _route_topics(self._view(self._state_topic), "topic/")
            }

    def topic_specs(self, names: Iterable[tuple[str, str]]) -> dict[tuple[str, str], TopicSpec]:
        self._sync()
        specs: dict[tuple[str, str], TopicSpec] = {}
        for route, topic in set(names):
            data = self._view(self._state_topic).get(f"topic/{route}/{topic}")
            if data is not None:
                specs[(route, topic)] = TopicSpec.from_json(route, topic, data)
        return specs

    def watch_drain(self, worker_id: str, on_change: Callable[[bool], None]) -> None:
        with self._cond:
            self._drain_watches.append((worker_id, on_change))
        on_change(self._view(self._live_topic).get(f"drain/{worker_id}") is not None)

    def drain_requested(self, worker_id: str) -> bool:
        self._sync()
        return self._view(self._live_topic).get(f"drain/{worker_id}") is not None

    def clear_drain_request(self, worker_id: str) -> None:
        self._sync()
        if self._view(self._live_topic).get(f"drain/{worker_id}") is not None:
            self._write([(f"drain/{worker_id}", None)])


def _route_topics(view: View, prefix: str) -> list[tuple[str, str, Any]]:
    found = []
    for rest, entry in view.under(prefix):
        route, _, topic = rest.partition("/")
        if topic:
            found.append((route, topic, entry))
    return found
