"""Producer ids for the batch pipeline's partitions: one idempotent producer id per partition copy.

Each partition asks InitProducerId (without a transactional id) when it starts and after every
rewind, so its sequences always start at 0 and never need repair. An answer for an older
position of the partition (``generation``) or for a partition stopped since is dropped; a failed
request (``COORDINATOR_LOAD_IN_PROGRESS`` on a fresh cluster, a broker away) is asked again after
``retry_s``, not at once, so a destination that is down costs one request per partition per
``retry_s``.

On a two-way route each id is published first (``publish``, the producer registry of
:mod:`strait.worker.batch.registry`): the partition gets it only once the registry acknowledged
it, so the opposite route can tell every batch it writes from a user's. A publication that
fails asks for a new id after ``retry_s``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from strait.worker.batch.partition import BatchPartition
from strait.worker.batch.sequences import ProducerIdentity
from strait.worker.startup import IDENTITY, mark

log = logging.getLogger(__name__)


class Publication(Protocol):
    """A producer id's publication under way (strait.worker.batch.registry.Published)."""

    done: bool
    error: str | None


class Publisher(Protocol):
    def publish(self, producer_id: int) -> Publication: ...
    def poll(self) -> None: ...


class Identities:
    def __init__(
        self, init_producer_id: Callable[[], Any], *, retry_s: float, publisher: Publisher | None = None
    ) -> None:
        self._init_producer_id = init_producer_id  # sends InitProducerId: the answer's future
        self._retry_s = retry_s
        self._publisher = publisher
        self._asked: list[tuple[BatchPartition, int, Any]] = []
        self._later: list[tuple[BatchPartition, int, float]] = []
        self._publishing: list[tuple[BatchPartition, int, ProducerIdentity, Publication]] = []

    def ask(self, part: BatchPartition) -> None:
        """Ask a producer id for ``part`` at its current position."""
        self._asked.append((part, part.generation, self._init_producer_id()))

    def take(self, now: float) -> None:
        """Give each partition whose answer came its producer id; ask again where it failed."""
        later, self._later = self._later, []
        for part, generation, at in later:
            if not part.active or part.generation != generation:
                continue
            if now >= at:
                self.ask(part)
            else:
                self._later.append((part, generation, at))
        asked, self._asked = self._asked, []
        for part, generation, future in asked:
            if not future.is_done:
                self._asked.append((part, generation, future))
            elif not part.active or part.generation != generation:
                continue
            elif future.succeeded() and not future.value.error_code:
                identity = ProducerIdentity(int(future.value.producer_id), int(future.value.producer_epoch))
                if self._publisher is None:
                    self._grant(part, identity)
                else:
                    self._publishing.append((part, generation, identity, self._publisher.publish(identity.producer_id)))
            else:
                why = future.exception if future.failed() else f"error {future.value.error_code}"
                log.info("%s: InitProducerId failed (%s); asking again in %.1fs", part.state.task, why, self._retry_s)
                self._later.append((part, generation, now + self._retry_s))
        if self._publisher is not None and self._publishing:
            self._take_publications(now)

    def _take_publications(self, now: float) -> None:
        assert self._publisher is not None
        self._publisher.poll()
        publishing, self._publishing = self._publishing, []
        for part, generation, identity, handle in publishing:
            if not handle.done:
                self._publishing.append((part, generation, identity, handle))
            elif not part.active or part.generation != generation:
                continue
            elif handle.error is None:
                self._grant(part, identity)
            else:
                # Never written under an id the opposite route could not tell from a user's.
                log.warning(
                    "%s: producer id %d not published (%s); asking a new one in %.1fs",
                    part.state.task,
                    identity.producer_id,
                    handle.error,
                    self._retry_s,
                )
                self._later.append((part, generation, now + self._retry_s))

    @staticmethod
    def _grant(part: BatchPartition, identity: ProducerIdentity) -> None:
        part.identity = identity
        mark(part.state, IDENTITY)
        part.next_sequence = 0
        part.appended = False
