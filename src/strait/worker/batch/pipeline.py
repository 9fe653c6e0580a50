"""The batch copy loop: whole record batches from the source leaders to the destination leaders.

A :class:`BatchPipeline` implements the copier's :class:`~strait.worker.pipeline.Pipeline`
protocol next to :class:`~strait.worker.fetch.RecordPipeline`: the copier adds and releases
partitions and commits the checkpoints their :class:`~strait.worker.checkpoint.AckTracker`
derives, the same way for both. One thread drives both clusters' sockets (one kafka-python
network selector, :mod:`strait.worker.batch.link`):

- one fetch in flight per source leader, covering every partition of that leader that has room
  in its queue, ``read_committed``, each partition from its own offset;
- the answers are split into batches and decided (:mod:`select`, :mod:`compat`); a partition
  whose batches cannot pass unchanged is handed to record mode (``state.mode``), which the
  copier sees and moves it to its record pipeline at the checkpoint;
- each batch is rewritten with the partition's own idempotent producer id, epoch and sequence
  and produced with ``acks=all``, one batch per partition per request, the partitions of one
  destination leader sharing requests, at most 5 batches in flight per partition;
- answers are accounted in order (:mod:`partition`): acknowledged batches move the checkpoint,
  retriable answers resend the same bytes, anything else rewinds to the checkpoint.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from confluent_kafka import KafkaError

from strait.access_errors import authorization_message
from strait.worker.batch.budget import FetchBudget
from strait.worker.batch.identities import Identities
from strait.worker.batch.leaders import LeaderCache
from strait.worker.batch.link import Key, Links, fetched_partitions, produced_partitions
from strait.worker.batch.partition import BatchPartition, Sent, Verdict
from strait.worker.batch.rtts import RoundTrips
from strait.worker.checkpoint import AckTracker
from strait.worker.pipeline import ACCESS_RETRY_S, REWIND_BACKOFF_S, PartitionState, PipelineLoop, PipelineSettings
from strait.worker.stalls import LoopWatch
from strait.worker.startup import ASSIGNED, FETCHED, PRODUCED, finish, mark

log = logging.getLogger(__name__)

# kafka-python error codes the fetch loop handles by name.
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
AUTHORIZATION_FAILED = {29, 30, 31}
LEADER_CHANGED = {5, 6, 74, 75, 56}  # refresh the leader and fetch again
RETRY_BACKOFF_S = 0.2
RESEND_BACKOFF_S = 0.1
GAP_SOURCE = "source"
GAP_DESTINATION = "destination"  # the observer's name for the destination cluster's clients
PRODUCE_TIMEOUT_MS = 30_000  # how long the destination leader waits for its replicas (acks=all)
# A topic's configs read for one partition's start serve its other partitions started this soon
# after: each read is a blocking round trip on the loop's only thread, and a new topic's
# partitions are added together (ten topics of two partitions: 20 reads instead of 40).
TOPIC_CONFIGS_REUSE_S = 2.0


class BatchPipeline(PipelineLoop):
    """Copies whole record batches, bit for bit apart from the producer fields of each header.

    ``links`` replaces the network clients (tests); it is made on the pipeline's thread otherwise.
    Accepts and ignores the record pipeline's other keyword arguments (the copier passes the
    same set to every pipeline).
    """

    def __init__(
        self,
        *,
        name: str,
        source: Mapping[str, Any],
        destination: Mapping[str, Any],
        group_id: str,
        client_id: str,
        settings: PipelineSettings = PipelineSettings(),
        observer: Any = None,
        links: Links | None = None,
        **_record_options: Any,
    ) -> None:
        self.name = name
        self._source_props, self._destination_props = source, destination
        self._client_id = f"{client_id}-{name}"
        self._settings = settings
        self._observer = observer
        self._links = links
        self._commands: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._parts: dict[Key, BatchPartition] = {}  # current partitions, by source key
        self._leaving: list[BatchPartition] = []  # stopped, with batches still in flight
        self._draining: list[tuple[PartitionState, threading.Event]] = []
        self._leaders = LeaderCache(
            self._lookup_leaders,
            refresh_s=RETRY_BACKOFF_S,
            missing_topic_s=settings.missing_topic_timeout_ms / 1000,
            clock=lambda: time.monotonic(),  # this module's clock (tests replace it)
        )
        self._fetches: dict[int, tuple[Any, dict[Key, int], float]] = {}  # source node -> fetch
        # (source topic, destination topic) -> what _add read of their configs, and when.
        self._topic_configs: dict[tuple[str, str], tuple[Any, bool, float]] = {}
        self._identities = Identities(self._init_producer_id, retry_s=RETRY_BACKOFF_S)
        # Produce round trips per destination broker, for the route's metrics (librdkafka's
        # statistics give them in record mode).
        stats = getattr(observer, "client_stats", None)
        self._rtts = None if stats is None else RoundTrips(stats(GAP_DESTINATION), self._client_id)
        self._stopping = threading.Event()
        self._flush_timeout_s = 0.0
        self._watch = LoopWatch(name)  # slow loop turns in the debug log (strait.worker.stalls)
        self._unreachable: str | None = None
        self._budget = FetchBudget.from_env()  # off unless set (strait.worker.batch.budget)
        self._thread = threading.Thread(target=self._run, name=f"strait-copy-{client_id}-{name}", daemon=True)

    # -- the Pipeline protocol (any thread) ----------------------------------------------------

    def add(self, state: PartitionState, offset: int, *, move: bool = False) -> None:
        """Start copying ``state``'s partition from exactly ``offset``."""
        tracker = self._begin(state, offset)
        if tracker is not None:
            # (The copier says why in ``state.mode_reason``: lagging, or nothing when a route
            # copies every partition in batch mode.)
            state.mode = "batch"
            self._commands.put(partial(self._add, state, tracker))

    def _close_unstarted(self) -> None:
        if self._links is not None:
            self._links.close()

    # -- the loop (pipeline thread) ------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._links is None and not self._stopping.is_set():
                self._connect()
            self._watch.run_here()
            step = self._watch.wrap(self._step)
            while not self._stopping.is_set():
                step()
        except Exception as exc:
            log.exception("pipeline %s crashed", self.name)
            for part in self._parts.values():
                part.state.error = part.state.error or f"pipeline {self.name} crashed: {exc}"
                part.state.fetching = False
        finally:
            self._shutdown()

    def _connect(self) -> None:
        """Connect to both clusters; while they cannot be reached, partitions added meanwhile go
        to record mode (whose clients wait for the clusters) and releases are served."""
        try:
            self._links = Links(self._source_props, self._destination_props, client_id=self._client_id)
            self._unreachable = None
        except Exception as exc:
            if self._unreachable is None:
                log.warning("pipeline %s: clusters unreachable (%s); trying again", self.name, exc)
            self._unreachable = f"clusters unreachable for batch mode: {type(exc).__name__}: {exc}"
            self._run_commands()
            self._stopping.wait(RETRY_BACKOFF_S * 10)

    def _step(self) -> None:
        """One turn of the loop; tests drive it directly."""
        links = self._links
        assert links is not None
        self._run_commands()
        now = time.monotonic()
        self._start_fetches(links, now)
        sent = self._send(links, now)
        with self._watch.idle():
            links.poll(0 if sent else 0.05)
        now = time.monotonic()
        self._identities.take(now)
        self._take_fetches(now)
        self._settle(now)
        self._finish_releases()
        if self._rtts is not None:
            self._rtts.report_due(lambda: self._leaders.known("destination"))

    def _shutdown(self) -> None:
        self._run_commands()
        for part in self._parts.values():
            part.stop()
            part.state.fetching = False
        deadline = time.monotonic() + self._flush_timeout_s
        links = self._links
        if links is not None:
            try:
                while self._in_flight() and time.monotonic() < deadline:
                    links.poll(0.05)
                    self._settle(time.monotonic())
            except Exception:
                log.warning("pipeline %s: flushing on stop failed", self.name, exc_info=True)
            remaining = self._in_flight()
            if remaining:
                log.warning("pipeline %s stopped with %d batches unacknowledged", self.name, remaining)
            links.close()
        for _, done in self._draining:
            done.set()
        self._draining.clear()

    def _in_flight(self) -> int:
        return sum(len(p.in_flight) for p in [*self._parts.values(), *self._leaving])

    # -- partitions ----------------------------------------------------------------------------

    def _add(self, state: PartitionState, tracker: AckTracker) -> None:
        links = self._links
        task = state.task
        if links is None:
            state.mode, state.mode_reason = "record", self._unreachable or "batch pipeline not connected"
            state.fetching = False
            return
        try:
            destination, compacted = self._configs(links, task.topic, task.destination_topic)
        except Exception as exc:
            # A cluster that cannot say what batch mode needs: copy this partition record by
            # record (nothing of it was sent; record mode starts at the same offset).
            log.info("%s: record mode (topic configs unavailable: %s)", task, exc)
            state.mode, state.mode_reason = "record", f"topic configs unavailable: {exc}"
            state.fetching = False
            return
        part = BatchPartition(state, tracker, destination=destination, compacted=compacted)
        old = self._parts.get(part.source)
        if old is not None:
            old.stop()
            self._leaving.append(old)
        self._parts[part.source] = part
        state.fetching = True
        mark(state, ASSIGNED)
        self._identities.ask(part)

    def _configs(self, links: Links, topic: str, destination_topic: str) -> tuple[Any, bool]:
        """The destination topic's batch-relevant configs and whether the source topic is
        compacted; read again once older than TOPIC_CONFIGS_REUSE_S."""
        now = time.monotonic()
        known = self._topic_configs.get((topic, destination_topic))
        if known is not None and now - known[2] <= TOPIC_CONFIGS_REUSE_S:
            return known[0], known[1]
        destination = links.destination.destination_topic(destination_topic)
        compacted = links.source.compacted(topic)
        self._topic_configs = {k: v for k, v in self._topic_configs.items() if now - v[2] <= TOPIC_CONFIGS_REUSE_S}
        self._topic_configs[(topic, destination_topic)] = (destination, compacted, now)
        return destination, compacted

    def _release(self, state: PartitionState, done: threading.Event) -> None:
        key = (state.task.topic, state.task.partition)
        part = self._parts.get(key)
        if part is not None and part.state is state:
            del self._parts[key]
            part.stop()
            self._leaving.append(part)
        state.fetching = False
        self._draining.append((state, done))
        self._finish_releases()

    def _finish_releases(self) -> None:
        self._leaving = [p for p in self._leaving if p.in_flight]
        if not self._draining:
            return
        still = []
        for state, done in self._draining:
            if state.tracker is None or state.tracker.in_flight == 0:
                done.set()
            else:
                still.append((state, done))
        self._draining = still

    def _to_record_mode(self, part: BatchPartition, reason: str) -> None:
        """Batches of this partition cannot pass unchanged: the copier moves it to its record
        pipeline, from the checkpoint, once nothing of it is in flight."""
        log.info("%s: record mode from the checkpoint on (%s)", part.state.task, reason)
        part.stop()
        part.state.mode, part.state.mode_reason = "record", reason
        part.state.fetching = False

    def _fail(self, part: BatchPartition, reason: str) -> None:
        if part.state.error is None:
            log.error("partition %s stopped: %s", part.state.task, reason)
            part.state.error = reason
        part.stop()
        part.state.fetching = False

    # -- fetching ------------------------------------------------------------------------------

    def _init_producer_id(self) -> Any:
        links = self._links
        assert links is not None
        return links.destination.init_producer_id()

    def _lookup_leaders(self, cluster: str, topic: str) -> Any:
        """A future of ``topic``'s leaders on ``cluster``: never a blocking round trip on the
        loop's only thread (see strait.worker.batch.leaders)."""
        links = self._links
        assert links is not None
        return (links.source if cluster == "source" else links.destination).leaders_async(topic)

    def _leader(self, part: BatchPartition, cluster: str, now: float) -> int | None:
        """The partition's leader on ``cluster``; None (the partition waits) while unknown, and a
        topic missing from that cluster long enough fails the partition (deleted under us)."""
        topic, partition = part.source if cluster == "source" else part.destination
        leader = self._leaders.leader(cluster, topic, partition)
        if leader is not None:
            return leader
        missing_s = self._leaders.gone(cluster, topic)
        if missing_s is not None:
            self._fail(part, f"{cluster} {topic}/{partition} does not exist (deleted?): missing for {missing_s:.0f}s")
        if not self._leaders.asking(cluster, topic):  # an answer on the way wakes the loop itself
            part.wait_until = now + RETRY_BACKOFF_S
        return None

    def _start_fetches(self, links: Links, now: float) -> None:
        # Fetched and not yet sent, over every partition: bounded like the record pipelines'
        # producer queue, so a thousand lagging partitions cannot each hold their own megabytes.
        if sum(p.queued_bytes for p in self._parts.values()) >= self._settings.producer_max_kbytes * 1024:
            return
        by_leader: dict[int, list[BatchPartition]] = {}
        held: set[int] = set()  # leaders with a partition left out because its queue is full
        for part in self._parts.values():
            if not part.active or part.fetch_pending:
                continue
            leader = self._leader(part, "source", now)
            if leader is None:
                continue
            if not part.wants_fetch(now):
                if part.queue_full:
                    held.add(leader)
            elif leader not in self._fetches:
                by_leader.setdefault(leader, []).append(part)
        settings = self._settings
        max_bytes = settings.fetch_max_bytes
        if self._budget is not None and by_leader:
            max_bytes = min(max_bytes, self._budget.available())
            if max_bytes <= 0:
                return
        for leader, parts in by_leader.items():
            # Long-poll only when no partition of the leader waits outside the request: one
            # left out (its queue full) must not wait a whole poll once its queue drains.
            wait_ms = 0 if leader in held else settings.fetch_wait_max_ms
            offsets = {p.source: p.fetch_offset for p in parts}
            future = links.source.fetch(
                leader,
                offsets,
                partition_max_bytes={p.source: p.fetch_bytes for p in parts},
                max_bytes=max_bytes,
                max_wait_ms=wait_ms,
            )
            for part in parts:
                part.fetch_pending = True
            self._fetches[leader] = (future, {p.source: p.generation for p in parts}, now)

    def _take_fetches(self, now: float) -> None:
        for leader, (future, asked, asked_at) in list(self._fetches.items()):
            if not future.is_done:
                continue
            del self._fetches[leader]
            for key in asked:
                part = self._parts.get(key)
                if part is not None:
                    part.fetch_pending = False
            if future.failed():
                log.info("pipeline %s: fetch from node %d failed: %s", self.name, leader, future.exception)
                self._leaders.forget("source", {k[0] for k in asked})
                for key in asked:
                    if key in self._parts:
                        self._parts[key].wait_until = now + RETRY_BACKOFF_S
                continue
            if self._observer is not None:
                self._observer.fetched(self.name, now - asked_at)
            for key, fetched in fetched_partitions(future.value).items():
                part = self._parts.get(key)
                if part is None or not part.active or asked.get(key) != part.generation:
                    continue  # released or repositioned since: a stale answer
                self._take_fetch(part, fetched, now)

    def _take_fetch(self, part: BatchPartition, fetched: Any, now: float) -> None:
        state = part.state
        code = fetched.error_code
        if code == 0:
            if self._budget is not None:
                self._budget.spend(len(fetched.records))
            if fetched.high_watermark > (state.source_end or 0):
                state.source_end = fetched.high_watermark
            decision = part.take_fetch(fetched, now)
            if state.trace is not None and part.queue:
                mark(state, FETCHED)
            if decision is not None:
                self._to_record_mode(part, f"{decision.reason.value}: {decision.detail}")
            return
        if code == OFFSET_OUT_OF_RANGE:
            # Source retention removed records not yet copied: record mode resets to the
            # earliest offset and counts what was lost, as it does for every route.
            self._to_record_mode(part, "checkpoint out of the source's range (retention)")
        elif code == UNKNOWN_TOPIC_OR_PARTITION:
            self._fail(part, "source: UNKNOWN_TOPIC_OR_PARTITION")
        elif code in AUTHORIZATION_FAILED:
            reason = refusal(self._source_props, code, part.source[0]) or f"source refused us: error {code}"
            if state.waiting != reason:
                log.error("partition %s: %s; trying again every %.0fs", state.task, reason, ACCESS_RETRY_S)
            state.waiting = reason
            part.wait_until = now + ACCESS_RETRY_S
        else:
            if code in LEADER_CHANGED:
                self._leaders.forget("source", {part.source[0]})
            part.wait_until = now + RETRY_BACKOFF_S

    # -- producing -----------------------------------------------------------------------------

    def _send(self, links: Links, now: float) -> bool:
        """Send what may be sent: resends first, then new batches; True if anything went out."""
        anything = False
        for part in self._parts.values():
            if part.redo and not part.in_flight and part.active and now >= part.wait_until:
                anything |= self._resend(links, part, now)
        while True:
            requests: dict[int, list[tuple[BatchPartition, Sent]]] = {}
            for part in self._parts.values():
                if not part.queue or not part.can_send(now):
                    continue
                leader = self._leader(part, "destination", now)
                if leader is None:
                    continue
                sent, fetched_at = part.next_batch(now)
                if sent is None:
                    continue
                if self._observer is not None and fetched_at is not None:
                    self._observer.queued(self.name, now - fetched_at, count=sent.records)
                requests.setdefault(leader, []).append((part, sent))
            if not requests:
                return anything
            anything = True
            for leader, batches in requests.items():
                future = links.destination.produce(
                    leader, {part.destination: sent.data for part, sent in batches}, timeout_ms=PRODUCE_TIMEOUT_MS
                )
                self._time_round_trip(future, leader, now)
                for part, sent in batches:
                    part.sending(sent, future)
                    if part.state.trace is not None:
                        mark(part.state, PRODUCED)

    def _time_round_trip(self, future: Any, node: int, sent_at: float) -> None:
        rtts = self._rtts
        if rtts is not None:
            future.add_callback(lambda _: rtts.record(node, time.monotonic() - sent_at))

    def _resend(self, links: Links, part: BatchPartition, now: float) -> bool:
        """Send the batches put aside again, in order, same bytes and sequences."""
        first = part.redo[0]
        if (now - first.first_sent_at) * 1000 > self._settings.delivery_timeout_ms:
            log.warning("%s: batch at %d not acknowledged in time; rewinding", part.state.task, first.first_offset)
            part.give_up()
            part.rewind_due = True
            return False
        leader = self._leader(part, "destination", now)
        if leader is None:
            return False
        # Before the destination holds a batch of this producer id, one at a time (see
        # BatchPartition.appended); the others follow once it is acknowledged.
        while part.redo and (part.appended or not part.in_flight):
            sent = part.redo.popleft()
            sent.sent_at = now
            part.sending(
                sent, links.destination.produce(leader, {part.destination: sent.data}, timeout_ms=PRODUCE_TIMEOUT_MS)
            )
        return True

    def _settle(self, now: float) -> None:
        for part in [*self._parts.values(), *self._leaving]:
            while part.in_flight and part.in_flight[0].future.is_done:
                future = part.in_flight[0].future
                answer: Any
                if future.failed():
                    answer = future.exception
                else:
                    answer = produced_partitions(future.value).get(part.destination)
                    if answer is None:
                        answer = RuntimeError("partition missing from the produce answer")
                sent, verdict, error = part.settle(answer)
                self._after_answer(part, sent, verdict, error, now)
            if part.rewind_due and not part.in_flight and part.active and now >= part.wait_until:
                self._rewind(part)

    def _after_answer(self, part: BatchPartition, sent: Sent, verdict: Verdict, error: str, now: float) -> None:
        observer = self._observer
        if verdict is Verdict.NOTHING:
            if part.state.trace is not None and sent.records:
                finish(part.state, now - sent.sent_at)
            if observer is not None:
                task = part.state.task
                # One observation standing for the batch's records, as record mode's samples do.
                observer.acked(
                    self.name,
                    task.destination_topic,
                    task.partition,
                    now - sent.sent_at,
                    sent.max_timestamp,
                    count=sent.records,
                )
                while part.gaps:
                    part.gaps -= 1
                    observer.offset_gap(GAP_SOURCE)
            return
        if verdict is Verdict.RESEND:
            if not part.active or part.rewind_due:
                part.give_up()  # released, handed over or rewinding: the checkpoint stays before it
                return
            part.wait_until = now + RESEND_BACKOFF_S * min(10, sent.attempts)
            self._leaders.forget("destination", {part.destination[0]})
            return
        if not part.active:
            return
        if verdict is Verdict.RECORD_MODE:
            self._to_record_mode(part, f"refused_by_destination: {error} (batch at {sent.first_offset})")
        elif verdict is Verdict.FAIL:
            self._fail(
                part, f"destination {part.destination[0]}/{part.destination[1]} does not exist (deleted?): {error}"
            )
        elif (denied := refusal(self._destination_props, error, part.destination[0])) is not None:
            self._wait_for_access(part, denied, now)
        elif not part.rewind_due:  # the batches sent after it fail too: said once
            log.warning(
                "%s: batch at %d failed (%s); resending from the checkpoint", part.state.task, sent.first_offset, error
            )
            part.rewind_due = True
            part.wait_until = now + REWIND_BACKOFF_S

    def _wait_for_access(self, part: BatchPartition, reason: str, now: float) -> None:
        """The destination refused us (an ACL): resend from the checkpoint every ACCESS_RETRY_S
        (an operator can fix it), as record mode does; the first acknowledgement clears it."""
        state = part.state
        if state.waiting != reason:
            log.error("partition %s: %s; trying again every %.0fs", state.task, reason, ACCESS_RETRY_S)
        state.waiting = reason
        part.rewind_due = True
        part.wait_until = now + ACCESS_RETRY_S

    def _rewind(self, part: BatchPartition) -> None:
        position = part.rewind()
        log.info("%s: rewound to %d under a new producer id", part.state.task, position)
        self._identities.ask(part)


def refusal(props: Mapping[str, Any], error: int | str, resource: str) -> str | None:
    """Who refused what, said as record mode says it (strait.access_errors), for a broker's error
    code or kafka-python's name of it; None when the error is no authorization failure."""
    code = getattr(KafkaError, error, None) if isinstance(error, str) and error.isupper() else error
    return authorization_message(props, KafkaError(code), resource) if isinstance(code, int) else None
