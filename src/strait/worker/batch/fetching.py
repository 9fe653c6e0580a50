"""The batch pipeline's fetching half: one fetch in flight per source leader for the partitions
with room in their queues, and the answers split into batches and decided
(:class:`~strait.worker.batch.pipeline.BatchPipeline` mixes it in)."""

from __future__ import annotations

from functools import partial
from typing import Any

from strait.worker.batch.core import RETRY_BACKOFF_S, LoopCore, log, refusal
from strait.worker.batch.gathering import fetch_wait
from strait.worker.batch.link import Links, fetched_partitions
from strait.worker.batch.partition import BatchPartition
from strait.worker.batch.provenance import RegistryUnreadable
from strait.worker.pipeline import ACCESS_RETRY_S
from strait.worker.startup import FETCHED, mark

# kafka-python error codes the fetch loop handles by name.
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
AUTHORIZATION_FAILED = {29, 30, 31}
LEADER_CHANGED = {5, 6, 74, 75, 56}  # refresh the leader and fetch again


class Fetching(LoopCore):
    """Fetch requests out, fetch answers in."""

    # Where each fetch request starts in its leader's partitions, turned by one per round.
    _fetch_turn = 0
    # Source leaders whose last fetch answer brought records (see PipelineSettings.fetch_gather_ms).
    _flowing: frozenset[int] = frozenset()

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
        if by_leader:
            max_bytes = self._pace.max_bytes(max_bytes)
            if max_bytes <= 0:
                return
        turn, self._fetch_turn = self._fetch_turn, self._fetch_turn + 1
        busy_for_s = self._destination_busy_for(now) if by_leader else None
        for leader, parts in by_leader.items():
            # A broker fills an answer capped by max_bytes in request order (KIP-74): a request
            # that always began with the same partitions would, at a low pace (1 MiB answers),
            # give them every answer while the others wait, so each round starts one further.
            start = turn % len(parts)
            parts = parts[start:] + parts[:start]
            # Long-poll only when no partition of the leader waits outside the request: one
            # left out (its queue full) must not wait a whole poll once its queue drains.
            # While records flow, gather them for as long as the destination stays busy
            # (strait.worker.batch.gathering).
            wait = fetch_wait(
                wait_max_ms=0 if leader in held else settings.fetch_wait_max_ms,
                gather_max_ms=settings.fetch_gather_ms,
                flowing=leader in self._flowing,
                busy_for_s=busy_for_s,
            )
            offsets = {p.source: p.fetch_offset for p in parts}
            future = links.source.fetch(
                leader,
                offsets,
                partition_max_bytes={p.source: p.fetch_bytes for p in parts},
                max_bytes=max_bytes,
                max_wait_ms=wait.wait_ms,
                min_bytes=wait.min_bytes,
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
            answer = fetched_partitions(future.value)
            if any(fetched.records for fetched in answer.values()):
                self._flowing |= {leader}
            else:
                self._flowing -= {leader}
            for key, fetched in answer.items():
                part = self._parts.get(key)
                if part is None or not part.active or asked.get(key) != part.generation:
                    continue  # released or repositioned since: a stale answer
                self._take_fetch(part, fetched, now)

    def _take_fetch(self, part: BatchPartition, fetched: Any, now: float) -> None:
        state = part.state
        code = fetched.error_code
        if code == 0:
            self._pace.spend(len(fetched.records))
            if fetched.high_watermark > (state.source_end or 0):
                state.source_end = fetched.high_watermark
            provenance = self._provenance
            judge = None if provenance is None else partial(provenance.judge, fetched_at=now)
            try:
                decision = part.take_fetch(fetched, now, judge)
            except RegistryUnreadable as exc:
                # Nothing of this answer was taken: the partition fetches it again after the
                # backoff (a copy is never guessed to be a user's).
                reason = f"producer registry on the source unreadable: {exc}"
                if state.waiting != reason:
                    log.warning("partition %s: %s; trying again", state.task, reason)
                state.waiting = reason
                part.wait_until = now + ACCESS_RETRY_S / 10
                return
            if state.waiting is not None and state.waiting.startswith("producer registry"):
                state.waiting = None
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
