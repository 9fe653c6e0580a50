"""The chaos injector's topic faults when no controller answers in time: the call may still
have taken effect, so the topic is added again later (adding is safe to repeat)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from strait.bench.chaos.inject import Injector
from strait.bench.chaos.schedule import Fault


class Calls:
    """Stands in for Injector._api: fails the first ``failures`` calls, then answers."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.made: list[str] = []

    def __call__(self, method: str, path: str, body: dict[str, Any] | None = None) -> str:
        self.made.append(f"{method} {path}")
        if self.failures:
            self.failures -= 1
            raise RuntimeError(f"{method} {path}: no controller answered within 90s")
        return f"{method} {path}"


def _injector(calls: Calls) -> Injector:
    injector = Injector(
        sandbox=None,  # type: ignore[arg-type]  # topic faults touch neither sandbox nor fleet
        fleet=None,  # type: ignore[arg-type]
        load=None,  # type: ignore[arg-type]
        topics={"t1": "chaos-t1", "late0": "chaos-late0"},
        clusters={"src": "src", "dst": "dst"},
    )
    injector._api = calls  # type: ignore[method-assign]
    return injector


def test_a_topic_add_without_an_answer_is_made_again_at_the_end() -> None:
    calls = Calls(failures=1)
    injector = _injector(calls)
    with pytest.raises(RuntimeError):
        injector.start(Fault(0, "topic-add", "late0", 1.0), time.monotonic() + 5)
    assert injector.restore() == ["fault 0 (topic-add): POST /topics/chaos-late0"]
    assert calls.made == ["POST /topics/chaos-late0", "POST /topics/chaos-late0"]


def test_a_topic_removal_without_an_answer_still_adds_the_topic_back() -> None:
    calls = Calls(failures=2)  # the removal, then the planned re-add
    injector = _injector(calls)
    fault = Fault(1, "topic-readd", "t1", 1.0, 5.0)
    with pytest.raises(RuntimeError):
        injector.start(fault, time.monotonic() + 5)
    with pytest.raises(RuntimeError):
        injector.end(fault)
    assert injector.restore() == ["fault 1 (topic-readd): POST /topics/chaos-t1"]
    assert calls.made == ["DELETE /topics/chaos-t1", "POST /topics/chaos-t1", "POST /topics/chaos-t1"]
    assert injector.restore() == [], "undone once"


def test_a_successful_topic_add_leaves_nothing_to_restore() -> None:
    calls = Calls(failures=0)
    injector = _injector(calls)
    assert injector.start(Fault(0, "topic-add", "late0", 1.0), time.monotonic() + 5) == "POST /topics/chaos-late0"
    assert injector.restore() == []
