"""What makes a route exactly-once: its pipelines and its checkpoint store, composed in one place."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from strait.config import RouteConfig
from strait.fencing import transactional_id
from strait.worker.lease import always
from strait.worker.transactional import TransactionalPipeline
from strait.worker.transactional_checkpoints import DestinationCheckpoints, destination_group


def exactly_once_parts(
    route: RouteConfig,
    *,
    source: Mapping[str, Any],
    destination: Mapping[str, Any],
    worker_id: str,
    lease: Callable[[], bool] = always,
) -> dict[str, Any]:
    """The ``Copier`` keyword arguments of an exactly-once route: transactional pipelines whose
    ids name the route, this worker and the pipeline (and write the route's offset map in their
    transactions), and checkpoints read from the destination."""
    from strait.worker.agent import checkpoint_group

    return {
        "pipeline_factory": partial(
            TransactionalPipeline,
            transactional_id=partial(transactional_id, route.name, worker_id),
            checkpoint_group=destination_group(route.name),
            transaction_interval_s=route.transaction_interval_ms / 1000,
            transaction_max_bytes=route.transaction_max_bytes,
            lease=lease,
            # The offset map's runs go into the same transactions as their records.
            map_route=route.name if route.offset_map else None,
        ),
        "checkpoints": DestinationCheckpoints(
            route=route.name,
            source=source,
            destination=destination,
            source_group_id=checkpoint_group(route.name),
            client_id=f"strait-{route.name}-{worker_id}",
        ),
    }
