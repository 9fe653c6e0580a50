"""Where a record was first written, carried in a header so two-way replication never loops.

With routes A→B and B→A over the same topic names, a record produced at A is copied to B and
must not be copied back to A (and again to B, forever). A route with ``active_active: true``
stamps every copy it writes record by record with the header ``strait.origin`` naming the
cluster the record was first written to (the route's source, unless the record already names
one), and skips the records whose origin is the route's own destination: they came from there.

That is record mode's way. Whole batches pass without a header: the batch pipeline tells the
opposite route's copies by their producer ids (:mod:`strait.worker.batch.provenance`), and
reads this header only in batches of producers it does not know (record-mode copies).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HEADER = "strait.origin"


@dataclass(frozen=True)
class OriginRule:
    """What one route stamps and skips."""

    source: str  # the route's source cluster: the origin of records that name none
    destination: str  # records naming it came from there and are not copied back
    header: str = HEADER

    def origin_of(self, headers: Sequence[tuple[str, Any]] | None) -> str | None:
        for name, value in headers or ():
            if name == self.header and value is not None:
                return value.decode() if isinstance(value, bytes) else str(value)
        return None

    def skips(self, headers: Sequence[tuple[str, Any]] | None) -> bool:
        """Whether a record with these headers came from the route's destination."""
        return self.origin_of(headers) == self.destination

    def stamp(self, headers: Sequence[tuple[str, Any]] | None) -> list[tuple[str, Any]]:
        """The headers of the copy: the record's, with the origin added if it names none."""
        kept = list(headers or ())
        if self.origin_of(kept) is None:
            kept.append((self.header, self.source.encode()))
        return kept
