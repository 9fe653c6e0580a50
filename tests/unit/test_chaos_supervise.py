"""The chaos run's supervisor restarts a process that failed by itself, as systemd's
`Restart=on-failure` would, and leaves alone what a fault holds down or what stopped cleanly."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from strait.bench.chaos.inject import Injector
from strait.bench.chaos.schedule import Fault
from strait.bench.chaos.supervise import RESTART_DELAY_S, Supervisor


class Proc:
    def __init__(self) -> None:
        self.code: int | None = None

    def poll(self) -> int | None:
        return self.code


class FakeFleet:
    def __init__(self, workdir: Path, workers: list[str], controllers: list[str]) -> None:
        self.workdir = workdir
        self.ports = {name: 9000 + i for i, name in enumerate(controllers)}
        self.processes: dict[str, Proc] = {name: Proc() for name in [*controllers, *workers]}
        self.started: list[str] = []

    def start_worker(self, name: str, pool: str | None = None) -> None:
        self.processes[name] = Proc()
        self.started.append(name)

    def start_controller(self, name: str = "c1") -> str:
        self.processes[name] = Proc()
        self.started.append(name)
        return f"http://127.0.0.1:{self.ports[name]}"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_worker_that_failed_is_started_again_after_the_delay(tmp_path: Path) -> None:
    fleet, clock = FakeFleet(tmp_path, ["w1", "w2"], ["c1"]), Clock()
    (tmp_path / "w1.log").write_text("copying\nwatchdog: turn overdue, exiting\n")
    supervisor = Supervisor(fleet, lambda _name: False, clock=clock)
    fleet.processes["w1"].code = 70
    fleet.processes["w2"].code = 0  # a clean stop: on-failure leaves it stopped
    supervisor.step()
    clock.now += RESTART_DELAY_S - 0.5
    supervisor.step()
    assert fleet.started == []
    clock.now += 0.5
    supervisor.step()
    assert fleet.started == ["w1"] and fleet.processes["w1"].poll() is None
    (restart,) = supervisor.restarts
    assert restart["process"] == "w1" and restart["code"] == 70
    assert restart["log_tail"][-1] == "watchdog: turn overdue, exiting"
    fleet.processes["c1"].code = -9
    supervisor.step()
    clock.now += RESTART_DELAY_S
    supervisor.step()
    assert fleet.started == ["w1", "c1"]


@pytest.mark.parametrize("seed", range(200))
def test_generated_histories_restart_exactly_the_failed_processes_no_fault_holds(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    fleet, clock = FakeFleet(tmp_path, ["w1", "w2", "w3"], ["c1", "c2"]), Clock()
    held: set[str] = set()
    supervisor = Supervisor(fleet, lambda name: name in held, clock=clock)
    failed_since: dict[str, float] = {}  # a failed, unheld process -> since when it is so
    for _ in range(60):
        name = rng.choice(sorted(fleet.processes))
        action = rng.random()
        if action < 0.2 and fleet.processes[name].code is None:
            fleet.processes[name].code = rng.choice([0, 1, 70, -9])
        elif action < 0.3:
            held.add(name)
        elif action < 0.4 and name in held:
            held.discard(name)
            if fleet.processes[name].code is not None and rng.random() < 0.7:
                fleet.start_worker(name)  # the fault's end restarted it (as the injector does)
        before = list(fleet.started)
        running = {n for n, p in fleet.processes.items() if p.code is None}
        supervisor.step()
        for restarted in fleet.started[len(before) :]:
            assert restarted not in held, "restarted a process a fault holds down"
            assert restarted not in running, "restarted a running process"
            assert restarted in failed_since and clock.now - failed_since[restarted] >= RESTART_DELAY_S
        for n, p in fleet.processes.items():
            if p.code not in (None, 0) and n not in held:
                failed_since.setdefault(n, clock.now)
            else:
                failed_since.pop(n, None)
        # Nothing failed and free waits much past the delay (one step a second, the first sees it).
        assert all(clock.now - since <= RESTART_DELAY_S + 1.0 for since in failed_since.values())
        clock.now += 1.0


def test_the_injector_holds_a_killed_worker_and_the_killed_leader() -> None:
    injector = Injector(sandbox=None, fleet=None, load=None, topics={}, clusters={})  # type: ignore[arg-type]
    kill_w1 = Fault(1, "worker-kill", "w1", 1.0, 5.0)
    injector._held[kill_w1.id] = kill_w1
    assert injector.struck("w1") and not injector.struck("w2")
    kill_leader = Fault(2, "controller-kill", "leader", 1.0, 5.0)
    injector._held[kill_leader.id] = kill_leader
    # Before it struck, which controller it kills is not known: every one is held.
    assert injector.struck("c1") and injector.struck("c2")
    injector._victims[kill_leader.id] = "c2"
    assert injector.struck("c2") and not injector.struck("c1")
    injector._release(kill_leader)
    assert not injector.struck("c2")


def test_a_supervisor_thread_stops_when_asked(tmp_path: Path) -> None:
    supervisor = Supervisor(FakeFleet(tmp_path, ["w1"], []), lambda _name: False)
    supervisor.start()
    supervisor.stop()
    assert supervisor._thread is not None and not supervisor._thread.is_alive()
