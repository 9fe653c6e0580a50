"""A worker stopped at once closes its ZooKeeper session first, but never hangs on it."""

from __future__ import annotations

import threading

from strait.worker.process import say_goodbye


class ClosingStore:
    def __init__(self, hang: bool = False) -> None:
        self.closed = threading.Event()
        self._release = threading.Event()
        self._hang = hang

    def close(self) -> None:
        if self._hang:
            self._release.wait(10)  # ZooKeeper does not answer
        self.closed.set()

    def release(self) -> None:
        self._release.set()


def test_goodbye_closes_the_session() -> None:
    store = ClosingStore()
    assert say_goodbye(store, 5.0) is True  # type: ignore[arg-type]  # only close() is used
    assert store.closed.is_set()


def test_goodbye_gives_up_when_the_store_does_not_answer() -> None:
    store = ClosingStore(hang=True)
    try:
        assert say_goodbye(store, 0.1) is False  # type: ignore[arg-type]
        assert not store.closed.is_set()
    finally:
        store.release()
