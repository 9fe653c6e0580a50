"""The batch copy loop: whole record batches from the source leaders to the destination leaders.

A :class:`BatchPipeline` implements the copier's :class:`~strait.worker.pipeline.Pipeline`
protocol next to :class:`~strait.worker.fetch.RecordPipeline`: the copier adds and releases
partitions and commits the checkpoints their :class:`~strait.worker.checkpoint.AckTracker`
derives, the same way for both. One thread drives both clusters' sockets (one kafka-python
network selector, :mod:`strait.worker.batch.link`):

- one fetch in flight per source leader, covering every partition of that leader that has room
  in its queue, ``read_committed``, each partition from its own offset;
- the answers are split into batches and decided (:mod:`select`, :mod:`compat`; on two-way
  routes, copies the opposite route wrote are skipped, :mod:`provenance`); a partition
  whose batches cannot pass unchanged is handed to record mode (``state.mode``), which the
  copier sees and moves it to its record pipeline at the checkpoint;
- each batch is rewritten with the partition's own idempotent producer id, epoch and sequence
  and produced with ``acks=all``, one batch per partition per request, the partitions of one
  destination leader sharing requests, at most 5 batches in flight per partition;
- answers are accounted in order (:mod:`partition`): acknowledged batches move the checkpoint,
  retriable answers resend the same bytes, anything else rewinds to the checkpoint.

This module holds the loop and the partitions' comings and goings; :mod:`fetching` and
:mod:`producing` its two halves, :mod:`core` the state and steps they share.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from strait.worker.batch.budget import PacedFetches
from strait.worker.batch.core import RETRY_BACKOFF_S, refusal
from strait.worker.batch.fetching import Fetching
from strait.worker.batch.gathering import DestinationClock
from strait.worker.batch.identities import Identities
from strait.worker.batch.leaders import LeaderCache
from strait.worker.batch.link import Key, Links
from strait.worker.batch.merging import MERGED_MAX_BYTES
from strait.worker.batch.partition import BatchPartition
from strait.worker.batch.producing import Producing
from strait.worker.batch.provenance import Provenance
from strait.worker.batch.registry import RegistryReader, RegistryWriter
from strait.worker.batch.rtts import RoundTrips
from strait.worker.checkpoint import AckTracker
from strait.worker.origin import OriginRule
from strait.worker.pipeline import PartitionState, PipelineLoop, PipelineSettings
from strait.worker.stalls import LoopWatch
from strait.worker.startup import ASSIGNED, mark

log = logging.getLogger(__name__)

__all__ = ["RETRY_BACKOFF_S", "BatchPipeline", "refusal"]

GAP_DESTINATION = "destination"  # the observer's name for the destination cluster's clients
# A topic's configs read for one partition's start serve its other partitions started this soon
# after: each read is a blocking round trip on the loop's only thread, and a new topic's
# partitions are added together (ten topics of two partitions: 20 reads instead of 40).
TOPIC_CONFIGS_REUSE_S = 2.0


class BatchPipeline(Fetching, Producing, PipelineLoop):
    """Copies whole record batches, bit for bit apart from the producer fields of each header.

    ``links`` replaces the network clients (tests); it is made on the pipeline's thread otherwise.
    ``origin``, on two-way routes, makes the pipeline publish its producer ids in the
    destination's registry before using them and skip the copies it fetches
    (:mod:`strait.worker.batch.provenance`). Accepts and ignores the record pipeline's other
    keyword arguments (the copier passes the same set to every pipeline).
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
        lanes: int | None = None,
        merge_bytes: int = MERGED_MAX_BYTES,
        origin: OriginRule | None = None,
        **_record_options: Any,
    ) -> None:
        self.name = name
        self._source_props, self._destination_props = source, destination
        self._client_id = f"{client_id}-{name}"
        self._settings = settings
        self._observer = observer
        self._links = links
        self._lanes = lanes  # produce connections per destination broker (None: one)
        self._merge_bytes = merge_bytes  # small batches merged up to this size (0: one by one)
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
        self._registry: tuple[RegistryWriter, RegistryReader] | None = None
        self._provenance: Provenance | None = None
        if origin is not None:
            writer = RegistryWriter(destination, source=origin.source, by=self._client_id, client_id=self._client_id)
            reader = RegistryReader(source, source=origin.destination, client_id=self._client_id)
            self._registry = (writer, reader)
            self._provenance = Provenance(origin.destination, read_registry=reader.read)
        self._identities = Identities(
            self._init_producer_id,
            retry_s=RETRY_BACKOFF_S,
            publisher=None if self._registry is None else self._registry[0],
        )
        # Produce round trips per destination broker, for the route's metrics (librdkafka's
        # statistics give them in record mode).
        stats = getattr(observer, "client_stats", None)
        self._rtts = None if stats is None else RoundTrips(stats(GAP_DESTINATION), self._client_id)
        self._stopping = threading.Event()
        self._flush_timeout_s = 0.0
        self._watch = LoopWatch(name)  # slow loop turns in the debug log (strait.worker.stalls)
        self._unreachable: str | None = None
        # The fetch rate the worker sets while the backlog shares it with realtime partitions
        # (strait.worker.batch.budget); unpaced until told.
        self._pace = PacedFetches(clock=lambda: time.monotonic())
        self._clock = DestinationClock()
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

    def set_pace(self, bytes_per_s: float | None) -> None:
        """Fetch at most ``bytes_per_s`` of source record batches from now on (None: unpaced).
        Any thread."""
        self._pace.set_rate(bytes_per_s)

    @property
    def fetched_bytes(self) -> int:
        """Source record bytes fetched so far."""
        return self._pace.fetched

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
            self._links = Links(
                self._source_props,
                self._destination_props,
                client_id=self._client_id,
                lanes=self._lanes or 1,
            )
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
        if not self._held:
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
        if self._registry is not None:
            for client in self._registry:
                try:
                    client.close()
                except Exception:
                    log.warning("pipeline %s: closing the producer registry clients failed", self.name, exc_info=True)
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
        part = BatchPartition(
            state, tracker, destination=destination, compacted=compacted, merge_bytes=self._merge_bytes
        )
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
