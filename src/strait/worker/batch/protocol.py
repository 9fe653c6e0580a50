"""The Kafka protocol as the batch pipeline speaks it: request versions, the isolation level it
fetches with, what a Fetch and a Produce answer per partition, and a broker's refusal.

Versions are capped where kafka-python's own clients cap them: Fetch 12 and Produce 9, the last
versions that name topics (13+ use topic ids, which would need a metadata lookup of ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from strait.worker.batch.select import AbortedTransaction

FETCH_MAX_VERSION = 12
PRODUCE_MAX_VERSION = 9
READ_COMMITTED = 1


class WireError(RuntimeError):
    """A broker answered with an error code (``code``) or did not answer."""

    def __init__(self, message: str, code: int = -1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a fetch response: its raw records and what comes with them."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[AbortedTransaction]
    records: bytes

    @classmethod
    def from_answer(cls, p: Any) -> FetchedPartition:
        """From one partition of kafka-python's decoded FetchResponse."""
        return cls(
            error_code=p.error_code,
            high_watermark=p.high_watermark,
            last_stable_offset=p.last_stable_offset,
            log_start_offset=p.log_start_offset,
            aborted=[AbortedTransaction(a.producer_id, a.first_offset) for a in p.aborted_transactions or []],
            records=bytes(p.records or b""),
        )


@dataclass(frozen=True, slots=True)
class Produced:
    """One partition of a produce response: its error code, the offset the broker gave the batch,
    and the broker's message, if any."""

    error_code: int
    base_offset: int
    error_message: str | None = None
