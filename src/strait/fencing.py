"""Transactional ids of exactly-once pipelines, and fencing them.

Each fetch pipeline of an exactly-once route writes the destination through one transactional
producer whose id names the route, the worker and the pipeline, so the same worker always
comes back with the same id. Whoever knows a worker's ids can *fence* it: ``init_transactions``
with the same id aborts the transaction it has open (its records stay invisible to
``read_committed`` readers, its offsets are never committed) and bumps the id's epoch, so every
later produce, offset commit or commit of the old producer fails with the fatal ``_FENCED``.

A fenced producer must never call ``init_transactions`` again on its own: that would fence the
fencer. Only a worker that owns its partitions again (a fresh assignment, read after the
fence) may start a new producer with its id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import KafkaException

from strait import clients

log = logging.getLogger(__name__)

PREFIX = "strait"
# Every pipeline name of strait.worker.copier: the record pipelines, and with copy: batch the
# backlog's and the realtime batch pipeline.
PIPELINES = ("realtime", "catchup", "batch", "realtime-batch")
# Fencing several ids at once: each init_transactions waits for its coordinator to abort the
# open transaction (about 0.5-1 s); they run side by side.
_MAX_PARALLEL = 8


class FenceError(Exception):
    """Some ids could not be fenced (destination unreachable, not authorized, ...).

    ``failures`` maps each id that failed to the reason; the ids not in it were fenced.
    """

    def __init__(self, failures: Mapping[str, str]) -> None:
        self.failures = dict(failures)
        detail = "; ".join(f"{tid}: {reason}" for tid, reason in sorted(self.failures.items()))
        super().__init__(f"could not fence {len(self.failures)} transactional id(s): {detail}")


def _escape(part: str, what: str) -> str:
    if not part:
        raise ValueError(f"{what} must not be empty")
    # Route names and worker ids (host names) may contain dots: escaped, the id stays unique.
    return part.replace("%", "%25").replace(".", "%2E")


def _unescape(part: str) -> str:
    return part.replace("%2E", ".").replace("%25", "%")


def transactional_id(route: str, worker_id: str, pipeline: str) -> str:
    """The stable transactional id of one worker's pipeline on one route.

    ``strait.<route>.<worker>.<pipeline>``, with ``%`` and ``.`` inside each part escaped as
    ``%25`` and ``%2E``, so two different (route, worker, pipeline) never share an id.
    """
    return ".".join((PREFIX, _escape(route, "route"), _escape(worker_id, "worker_id"), _escape(pipeline, "pipeline")))


def parse_transactional_id(value: str) -> tuple[str, str, str] | None:
    """(route, worker_id, pipeline) of an id made by :func:`transactional_id`, else ``None``."""
    parts = value.split(".")
    if len(parts) != 4 or parts[0] != PREFIX or not all(parts[1:]):
        return None
    return _unescape(parts[1]), _unescape(parts[2]), _unescape(parts[3])


def worker_transactional_ids(routes: Iterable[str], worker_id: str, pipelines: Iterable[str] = PIPELINES) -> list[str]:
    """Every id a worker may write with, for the given (exactly-once) routes."""
    names = tuple(pipelines)
    return [transactional_id(route, worker_id, pipeline) for route in routes for pipeline in names]


def fence(destination_props: Mapping[str, Any], transactional_ids: Iterable[str], timeout_s: float) -> None:
    """Bump the epoch of every id on the destination cluster, so no zombie can write with it.

    Each id gets a short-lived producer whose ``init_transactions`` aborts any open transaction
    of that id and fences its previous producer. Returns once every id is fenced; raises
    :class:`FenceError` naming the ids that were not (every id is tried, within ``timeout_s``
    overall). Fencing an id nobody uses is harmless.
    """
    ids = sorted(set(transactional_ids))
    if not ids:
        return
    deadline = time.monotonic() + timeout_s
    with ThreadPoolExecutor(max_workers=min(_MAX_PARALLEL, len(ids)), thread_name_prefix="strait-fence") as pool:
        results = dict(zip(ids, pool.map(lambda tid: _fence_one(destination_props, tid, deadline), ids), strict=True))
    failures = {tid: reason for tid, reason in results.items() if reason is not None}
    if failures:
        raise FenceError(failures)
    log.info("fenced %d transactional id(s) in %.2fs", len(ids), timeout_s - (deadline - time.monotonic()))


def _fence_one(destination_props: Mapping[str, Any], tid: str, deadline: float) -> str | None:
    """Fence one id; the reason it failed, or ``None``."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return "no time left before the fencing deadline"
    try:
        producer = clients.producer(
            destination_props,
            **{"transactional.id": tid, "client.id": f"strait-fence-{tid}", "enable.idempotence": True},
        )
    except KafkaException as exc:
        return f"cannot create a producer: {exc.args[0]}"
    try:
        producer.init_transactions(remaining)
    except KafkaException as exc:
        err = exc.args[0]
        return f"{err.name()}: {err.str()}"
    finally:
        # Nothing was produced: flush returns at once and releases the client's threads.
        producer.flush(0)
    return None
