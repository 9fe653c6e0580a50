"""The batch pipeline's producing half: rewritten batches to the destination leaders, one per
partition per request, and the answers accounted in order: acknowledged batches move the
checkpoint, retriable answers resend the same bytes, anything else rewinds to the checkpoint
(:class:`~strait.worker.batch.pipeline.BatchPipeline` mixes it in)."""

from __future__ import annotations

import time
from typing import Any

from strait.worker.batch.core import LoopCore, log, refusal
from strait.worker.batch.gathering import DestinationClock
from strait.worker.batch.link import Links, produced_partitions
from strait.worker.batch.partition import BatchPartition, Sent, Verdict
from strait.worker.pipeline import ACCESS_RETRY_S, REWIND_BACKOFF_S
from strait.worker.startup import PRODUCED, finish, mark

RESEND_BACKOFF_S = 0.1
GAP_SOURCE = "source"
PRODUCE_TIMEOUT_MS = 30_000  # how long the destination leader waits for its replicas (acks=all)


class Producing(LoopCore):
    """Produce requests out, produce answers in."""

    _clock: DestinationClock

    def _destination_busy_for(self, now: float) -> float | None:
        # Batches fetched and not yet sent count: this turn sends them right after its fetches.
        in_flight = any(part.in_flight or part.queue for part in self._parts.values())
        return self._clock.busy_for(now, in_flight=in_flight)

    def _send(self, links: Links, now: float) -> bool:
        """Send what may be sent: resends first, then new batches; True if anything went out."""
        anything = False
        for part in self._parts.values():
            if part.redo and not part.in_flight and part.active and now >= part.wait_until:
                anything |= self._resend(links, part, now)
        while True:
            # By leader and lane (connection to it): a request goes out on one connection.
            requests: dict[tuple[int, int], list[tuple[BatchPartition, Sent]]] = {}
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
                requests.setdefault((leader, links.destination.lane_of(part.destination)), []).append((part, sent))
            if not requests:
                return anything
            anything = True
            for (leader, _), batches in requests.items():
                future = links.destination.produce(
                    leader, {part.destination: sent.data for part, sent in batches}, timeout_ms=PRODUCE_TIMEOUT_MS
                )
                self._time_round_trip(future, leader, now)
                self._clock.sent(now)
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
            self._clock.sent(now)
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
            self._clock.answered(now - sent.sent_at)
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
