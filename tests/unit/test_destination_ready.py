"""Destination topics made ready in the background: a copier asks without waiting for them."""

from __future__ import annotations

import threading

from strait.worker.destination import DestinationError, DestinationTopics


class GatedTopics(DestinationTopics):
    """`ensure` answers only once the test opens the topic's gate (no cluster needed)."""

    def __init__(self) -> None:
        super().__init__(source={"bootstrap.servers": "127.0.0.1:1"}, destination={"bootstrap.servers": "127.0.0.1:1"})
        self.gates: dict[str, threading.Event] = {}
        self.asked: list[str] = []

    def ensure(self, source_topic: str, destination_topic: str, *, min_partitions: int = 0) -> int:
        self.asked.append(destination_topic)
        self.gates.setdefault(destination_topic, threading.Event()).wait(30)
        if destination_topic == "broken":
            raise DestinationError("destination topic 'broken': refused")
        self._ensured[destination_topic] = min_partitions  # as the real one remembers it
        return min_partitions

    def open(self, topic: str) -> None:
        self.gates.setdefault(topic, threading.Event()).set()


def _until_ready(topics: GatedTopics, wanted: dict[tuple[str, str], int], pair: tuple[str, str]) -> object:
    """Ask as the copier does; a pair reported ready or failed is not asked for again."""
    for _ in range(3000):
        results = topics.ready(wanted)
        if pair in results:
            del wanted[pair]
            return results[pair]
        threading.Event().wait(0.01)
    raise AssertionError(f"{pair} never became ready")


def test_ready_never_waits_and_reports_each_topic_when_its_own_creation_is_done() -> None:
    topics = GatedTopics()
    wanted = {("a", "a"): 2, ("b", "b"): 1, ("broken", "broken"): 1}
    topics.prepare({("a", "a"): 2})
    # Nothing is done yet: nothing is reported, and what was not prepared is started.
    assert topics.ready(wanted) == {}
    topics.open("b")
    assert _until_ready(topics, wanted, ("b", "b")) == 1
    # "a" is still being made ready: it holds back neither "b" nor the caller.
    assert ("a", "a") not in topics.ready(wanted)
    topics.open("broken")
    assert isinstance(_until_ready(topics, wanted, ("broken", "broken")), DestinationError)
    topics.open("a")
    assert _until_ready(topics, wanted, ("a", "a")) == 2
    assert sorted(topics.asked) == ["a", "b", "broken"]  # each made ready once
    # Known now: answered at once, without another round of admin calls.
    assert topics.ready({("a", "a"): 2, ("b", "b"): 1}) == {("a", "a"): 2, ("b", "b"): 1}
    assert sorted(topics.asked) == ["a", "b", "broken"]
