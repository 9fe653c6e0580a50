"""A new partition's way to its first copied record, step by step, in one debug line."""

from __future__ import annotations

import logging

import pytest

from strait.worker.startup import ASSIGNED, FETCHED, PRODUCED, StartTrace, mark
from tests.unit.test_deliveries import Rig


def test_the_first_acknowledgement_logs_every_step_once_and_drops_the_trace(caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig(0)
    rig.state.trace = StartTrace(now=0.0)
    mark(rig.state, ASSIGNED)
    mark(rig.state, FETCHED)
    mark(rig.state, ASSIGNED)  # a second time: the first counts
    rig.send(0, 2)
    assert rig.state.trace is not None and list(rig.state.trace.marks) == [ASSIGNED, FETCHED, PRODUCED]
    with caplog.at_level(logging.DEBUG, logger="strait.worker.startup"):
        rig.ack(0, 100)
        rig.book.settle()
        rig.ack(1, 101)
        rig.book.settle()
    lines = [r.getMessage() for r in caplog.records if r.name == "strait.worker.startup"]
    assert len(lines) == 1
    assert lines[0].startswith("first record of r/orders/0 acknowledged ")
    assert f"{ASSIGNED} +" in lines[0] and f"{FETCHED} +" in lines[0] and f"{PRODUCED} +" in lines[0]
    assert rig.state.trace is None
