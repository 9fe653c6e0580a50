"""What the controller hands a worker: one source partition to copy, and where to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Start = Literal["earliest", "latest"]


@dataclass(frozen=True)
class PartitionTask:
    """One source partition of a route, copied to the same partition number of ``destination_topic``.

    ``start`` applies only when the route's consumer group has no checkpoint for the partition.
    """

    route: str
    topic: str
    partition: int
    destination_topic: str
    start: Start = "earliest"

    def __str__(self) -> str:
        return f"{self.route}/{self.topic}/{self.partition}"
