"""What makes a route exactly-once: its pipelines and its checkpoint store, composed in one place.

Every pipeline has a transactional id of its own (:func:`strait.fencing.transactional_id`:
route, worker, pipeline name), among those the controller fences
(:data:`strait.fencing.PIPELINES`). With batch copy mode the batch pipelines (the backlog's and
the realtime one) are :class:`~strait.worker.batch.transactional.TransactionalBatchPipeline`
and run in the worker's process: the backlog process (strait.worker.batch.remote) relays
acknowledged positions, while a transactional pipeline's checkpoint is the committed offset,
its abandon waits for an abort, and its lease is read at each begin and commit. Partitions whose
batches cannot pass unchanged move to the record pipelines, transactional as well.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from strait.config import RouteConfig
from strait.fencing import transactional_id
from strait.worker.batch.transactional import TransactionalBatchPipeline
from strait.worker.lease import always
from strait.worker.pipeline import Pipeline
from strait.worker.transactional import TransactionalPipeline
from strait.worker.transactional_checkpoints import DestinationCheckpoints, destination_group


def exactly_once_parts(
    route: RouteConfig,
    *,
    source: Mapping[str, Any],
    destination: Mapping[str, Any],
    worker_id: str,
    lease: Callable[[], bool] = always,
    batches: bool = False,
) -> dict[str, Any]:
    """The ``Copier`` keyword arguments of an exactly-once route: transactional pipelines whose
    ids name the route, this worker and the pipeline (and write the route's offset map in their
    transactions), transactional batch pipelines too with ``batches`` (the route copies whole
    batches), and checkpoints read from the destination."""
    from strait.worker.agent import checkpoint_group

    ids = partial(transactional_id, route.name, worker_id)
    transactions: dict[str, Any] = {
        "checkpoint_group": destination_group(route.name),
        "transaction_interval_s": route.transaction_interval_ms / 1000,
        "transaction_linger_s": route.transaction_linger_ms / 1000,
        "transaction_max_bytes": route.transaction_max_bytes,
        "lease": lease,
        # The offset map's runs go into the same transactions as their records.
        "map_route": route.name if route.offset_map else None,
    }
    parts: dict[str, Any] = {
        "pipeline_factory": partial(
            TransactionalPipeline,
            transactional_id=ids,
            **transactions,
        ),
        "checkpoints": DestinationCheckpoints(
            route=route.name,
            source=source,
            destination=destination,
            source_group_id=checkpoint_group(route.name),
            client_id=f"strait-{route.name}-{worker_id}",
        ),
    }
    if batches:
        parts["batch_factory"] = partial(transactional_batches, transactional_ids=ids, **transactions)
    return parts


def transactional_batches(*, name: str, transactional_ids: Callable[[str], str], **options: Any) -> Pipeline:
    """A transactional batch pipeline named ``name``, with the transactional id of that name."""
    return TransactionalBatchPipeline(name=name, transactional_id=transactional_ids(name), **options)
