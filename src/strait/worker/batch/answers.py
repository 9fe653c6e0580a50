"""Answers of the batch pipeline's requests, read into the plain values the pipeline works with:
leaders from Metadata, partitions from Fetch and Produce responses."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from strait.worker.batch.outcomes import error_name
from strait.worker.batch.protocol import FetchedPartition, Produced, WireError

Key = tuple[str, int]


def leaders_of(response: Any, topic: str) -> dict[int, int]:
    """Partition to leader node id of ``topic`` in a Metadata answer (no leader: left out)."""
    for t in response.topics:
        if t.name == topic:
            if t.error_code:
                raise WireError(f"metadata of {topic}: {error_name(t.error_code)}", t.error_code)
            return {int(p.partition_index): int(p.leader_id) for p in t.partitions if p.leader_id >= 0}
    raise WireError(f"{topic} not in the metadata")


def fetched_partitions(response: Any) -> dict[Key, FetchedPartition]:
    """Every partition of a fetch response by (topic, partition)."""
    out: dict[Key, FetchedPartition] = {}
    for t in response.responses:
        for p in t.partitions:
            out[(t.topic, p.partition_index)] = FetchedPartition.from_answer(p)
    return out


def produced_partitions(response: Any) -> dict[Key, Produced]:
    """Every partition of a produce response by (topic, partition); the same dict (not to be
    changed) for the same response.

    Each partition of a request asks for its own answer: read anew each time, a request that
    carried the batches of P partitions was read P times (P² answers built; 64 partitions of one
    leader: 4,096 per request). The last answers read on this thread are kept.
    """
    cache: OrderedDict[int, tuple[Any, dict[Key, Produced]]] | None = getattr(_answers, "produced", None)
    if cache is None:
        cache = _answers.produced = OrderedDict()
    known = cache.get(id(response))
    if known is not None and known[0] is response:
        return known[1]
    parsed = {
        (t.name, p.index): Produced(p.error_code, p.base_offset, getattr(p, "error_message", None))
        for t in response.responses
        for p in t.partition_responses
    }
    cache[id(response)] = (response, parsed)  # the response held: its id cannot be reused meanwhile
    if len(cache) > ANSWERS_KEPT:
        cache.popitem(last=False)
    return parsed


# Produce answers read lately, per thread (each pipeline has its own thread): see produced_partitions.
_answers = threading.local()
ANSWERS_KEPT = 256
