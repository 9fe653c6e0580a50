"""The sandbox never hands out one port twice, even when its random draws repeat."""

from __future__ import annotations

import itertools

from strait.sandbox import ports


def test_a_port_drawn_again_is_not_handed_out_twice(monkeypatch) -> None:
    draws = itertools.chain([12_345, 12_345, 12_345], itertools.count(12_346))
    monkeypatch.setattr(ports, "_handed", set())
    monkeypatch.setattr(ports.random, "randint", lambda low, high: next(draws))
    monkeypatch.setattr(ports, "_bindable", lambda port: True)
    handed = [ports.free_port() for _ in range(5)]
    assert handed[0] == 12_345
    assert len(set(handed)) == 5


def test_the_ephemeral_fallback_skips_ports_handed_out_before(monkeypatch) -> None:
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: ports._LOWEST + 10)
    monkeypatch.setattr(ports, "_handed", set())
    handed = {ports.free_port() for _ in range(20)}
    assert len(handed) == 20
