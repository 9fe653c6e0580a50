"""A destination topic that exists already but is met for the first time (the controller may have
created it a moment ago) has its leaders checked before the copier produces to it; after that,
what is known costs no such check."""

from __future__ import annotations

from typing import Any

import pytest

from strait.worker import destination
from strait.worker.destination import DestinationTopics


class Source:
    def describe_configs(self, resources: list[Any], request_timeout: float) -> dict[Any, None]:
        return dict.fromkeys(resources)


class Checked(DestinationTopics):
    """No cluster: partition counts from a dict, leaders' checks recorded."""

    def __init__(self, counts: dict[str, int]) -> None:
        super().__init__(
            source={"bootstrap.servers": "127.0.0.1:1"},
            destination={"bootstrap.servers": "127.0.0.1:1"},
            replication_factor=1,
        )
        self._source = Source()  # type: ignore[assignment]
        self.counts = counts
        self.checked: list[str] = []

    def _await_partitions(self, destination_topic: str, wanted: int) -> int:
        self.checked.append(destination_topic)
        return self.counts[destination_topic]


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    known = {"src": 2, "made-by-the-controller": 2}
    monkeypatch.setattr(destination, "_describe_async", lambda admin, topic, timeout_s: topic)
    monkeypatch.setattr(destination, "_count", lambda future, topic, timeout_s: known.get(future))
    return known


def test_an_existing_topic_met_first_is_checked_for_leaders_once(counts: dict[str, int]) -> None:
    topics = Checked(counts)
    assert topics.ensure("src", "made-by-the-controller") == 2
    assert topics.checked == ["made-by-the-controller"]
    # Known now: asked again (with or without a partition count), its leaders are not checked again.
    assert topics.ensure("src", "made-by-the-controller") == 2
    assert topics.ensure("src", "made-by-the-controller", min_partitions=2) == 2
    assert topics.checked == ["made-by-the-controller"]


def test_closed_topics_let_go_of_their_admin_clients(counts: dict[str, int]) -> None:
    topics = Checked(counts)
    topics.close()
    assert not hasattr(topics, "_destination") and not hasattr(topics, "_creator")
