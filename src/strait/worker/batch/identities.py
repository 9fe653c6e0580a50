"""Producer ids for the batch pipeline's partitions: one idempotent producer id per partition copy.

Each partition asks InitProducerId (without a transactional id) when it starts and after every
rewind, so its sequences always start at 0 and never need repair. An answer for an older
position of the partition (``generation``) or for a partition stopped since is dropped; a failed
request (``COORDINATOR_LOAD_IN_PROGRESS`` on a fresh cluster, a broker away) is asked again after
``retry_s``, not at once, so a destination that is down costs one request per partition per
``retry_s``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from strait.worker.batch.partition import BatchPartition
from strait.worker.batch.sequences import ProducerIdentity
from strait.worker.startup import IDENTITY, mark

log = logging.getLogger(__name__)


class Identities:
    def __init__(self, init_producer_id: Callable[[], Any], *, retry_s: float) -> None:
        self._init_producer_id = init_producer_id  # sends InitProducerId: the answer's future
        self._retry_s = retry_s
        self._asked: list[tuple[BatchPartition, int, Any]] = []
        self._later: list[tuple[BatchPartition, int, float]] = []

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
                part.identity = ProducerIdentity(int(future.value.producer_id), int(future.value.producer_epoch))
                mark(part.state, IDENTITY)
                part.next_sequence = 0
                part.appended = False
            else:
                why = future.exception if future.failed() else f"error {future.value.error_code}"
                log.info("%s: InitProducerId failed (%s); asking again in %.1fs", part.state.task, why, self._retry_s)
                self._later.append((part, generation, now + self._retry_s))
