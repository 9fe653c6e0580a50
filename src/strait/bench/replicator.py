"""What the scenarios need from a replicator under test, whichever it is."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Replicator(Protocol):
    """A running replicator (Strait or MirrorMaker 2) copying ``src`` to ``dst`` in the sandbox."""

    name: str  # "strait" or "mm2"
    parallelism: int  # Strait worker processes, or MirrorMaker tasks

    def start(self, topics: Sequence[str]) -> None:
        """Start copying ``topics`` (same names on the destination) from their earliest offset."""

    def add_topics(self, topics: Sequence[str]) -> float:
        """Begin copying more topics that already exist on the source; return when that was asked (time.time())."""

    def pids(self) -> list[int]:
        """The processes doing the copying (measured for CPU and memory)."""

    def kill_one(self) -> str:
        """kill -9 one of the replicator's copying processes; return which."""

    def describe(self) -> dict[str, object]:
        """Settings worth recording with the results."""

    def stop(self) -> None:
        """Stop every process it started."""
