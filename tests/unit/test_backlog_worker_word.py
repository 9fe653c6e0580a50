"""The backlog process fetches only while its worker speaks (strait.worker.batch.child.WorkerWord):
a frozen or starved worker commits nothing of what the process copies, so the process holds on its
own; the copier's every turn is that word (strait.worker.batch.remote.BacklogProcess.hold)."""

from __future__ import annotations

import random
from typing import Any

from strait.worker.batch.child import WORKER_SILENCE_S, WorkerWord
from strait.worker.batch.remote import KEEPALIVE_S, BacklogProcess


def test_the_process_holds_exactly_when_asked_or_when_the_worker_is_silent_too_long() -> None:
    rng = random.Random(11)
    for _ in range(200):
        now = rng.uniform(0, 100)
        word = WorkerWord(now)
        heard, asked = now, False
        for _ in range(50):
            now += rng.choice([0.0, 0.01, KEEPALIVE_S, 1.0, WORKER_SILENCE_S, 5.0])
            kind = rng.choice(["hold", "hold", "add", "pace", None])
            if kind == "hold":
                asked = rng.random() < 0.3
                word.heard(now, hold=asked)
                heard = now
            elif kind is not None:
                word.heard(now)
                heard = now
            silent = now - heard > WORKER_SILENCE_S
            assert word.held(now) == (asked or silent)
            assert word.silent == silent


def test_a_worker_heard_within_the_silence_keeps_the_backlog_fetching() -> None:
    word = WorkerWord(0.0)
    for step in range(1, 100):
        word.heard(step * KEEPALIVE_S, hold=False)
        assert not word.held(step * KEEPALIVE_S + KEEPALIVE_S)
    assert word.held(99 * KEEPALIVE_S + WORKER_SILENCE_S + 0.01)


def test_the_copiers_every_turn_reaches_the_child_on_a_change_and_at_least_every_keepalive() -> None:
    backlog = BacklogProcess(name="batch", source={}, destination={}, group_id="g", client_id="c")
    sent: list[Any] = []
    backlog._send = sent.append  # type: ignore[method-assign]
    try:
        for _ in range(20):
            backlog.hold(False)  # turns 50 ms apart, faster than the keepalive
        assert sent == [("hold", False)]
        backlog.hold(True)
        backlog.hold(True)
        assert sent[1:] == [("hold", True)]
        on, at = backlog._hold_sent or (True, 0.0)
        backlog._hold_sent = (on, at - KEEPALIVE_S)  # a keepalive interval later
        backlog.hold(True)
        assert sent[2:] == [("hold", True)]
    finally:
        backlog.stop(0)
