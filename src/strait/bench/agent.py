"""The benchmark's producer and destination reader as separate processes.

``python -m strait.bench.agent produce|read SPEC.json``. Running them apart from the harness
(and from each other) keeps their work off one interpreter lock, so a latency figure is
the replicator's and not a Python thread's wait. The harness talks to them through files:
the spec in, a ``ready`` file once the reader is assigned, a ``stop`` file holding how many
distinct records to expect (for a producer: that its traffic should end early), and the results out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strait.bench import reader, records, workload


@dataclass
class Agent:
    """A running agent process."""

    role: str
    spec_path: Path
    proc: subprocess.Popen[bytes]

    @property
    def out(self) -> Path:
        return self.spec_path.with_suffix(".out")

    def wait(self, timeout_s: float) -> None:
        try:
            code = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"{self.role} agent did not finish within {timeout_s:.0f}s") from None
        if code != 0:
            raise RuntimeError(f"{self.role} agent exited with {code}; see {self.spec_path.with_suffix('.log')}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _spawn(role: str, spec: Mapping[str, Any], path: Path) -> Agent:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec))
    with open(path.with_suffix(".log"), "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "strait.bench.agent", role, str(path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    return Agent(role, path, proc)


def start_producer(
    path: Path,
    props: Mapping[str, Any],
    topics: Mapping[str, int],
    *,
    rate: float,
    duration_s: float,
    size: int,
    start_seq: Mapping[tuple[str, int], int] | None = None,
    payload: str = "filler",
) -> Agent:
    """Produce at ``rate`` for ``duration_s`` (bodies of the ``payload`` kind); results are the
    per-partition counts."""
    spec = {
        "props": dict(props),
        "topics": dict(topics),
        "rate": rate,
        "duration_s": duration_s,
        "size": size,
        "start_seq": [[t, p, s] for (t, p), s in (start_seq or {}).items()],
        "payload": payload,
    }
    return _spawn("produce", spec, path)


def producer_result(agent: Agent) -> tuple[workload.Counts, int, int]:
    """(counts per partition, first send µs, last send µs) of a finished producer agent."""
    raw = json.loads(agent.out.read_text())
    counts = {(t, p): n for t, p, n in raw["counts"]}
    return counts, raw["started_us"], raw["ended_us"]


def start_reader(
    path: Path,
    props: Mapping[str, Any],
    topics: Sequence[str],
    *,
    ready_topics: Sequence[str],
    deadline_s: float,
    isolation_level: str | None = None,
) -> Agent:
    """Read ``topics`` until told to stop (``stop_reader``) or ``deadline_s`` passes."""
    spec = {
        "props": dict(props),
        "topics": list(topics),
        "ready_topics": list(ready_topics),
        "deadline_s": deadline_s,
        "isolation_level": isolation_level,
    }
    return _spawn("read", spec, path)


def wait_ready(agent: Agent, timeout_s: float = 60) -> None:
    ready = agent.spec_path.with_suffix(".ready")
    deadline = time.monotonic() + timeout_s
    while not ready.exists():
        if agent.proc.poll() is not None:
            raise RuntimeError(f"reader agent exited early; see {agent.spec_path.with_suffix('.log')}")
        if time.monotonic() > deadline:
            raise RuntimeError("reader agent was not assigned its topics in time")
        time.sleep(0.05)


def stop_reader(agent: Agent, expected: int, *, drain_s: float) -> reader.Arrivals:
    """Tell the reader how many distinct records to wait for (at most ``drain_s`` more); its arrivals."""
    stop = agent.spec_path.with_suffix(".stop")
    stop.write_text(json.dumps({"expected": expected, "drain_s": drain_s}))
    agent.wait(drain_s + 30)
    return reader.Arrivals.load(agent.out)


def stop_producer(agent: Agent) -> None:
    """Ask a producer agent to end its traffic now (it then flushes and writes its results)."""
    agent.spec_path.with_suffix(".stop").touch()


def _produce(spec: dict[str, Any], out: Path) -> None:
    payload = spec.get("payload", "filler")
    # Built before the traffic's start is taken: a large pool takes seconds to build.
    records.payload_pool(payload, max(0, spec["size"] - records.STAMP_SIZE))
    started_us = time.time_ns() // 1000
    stop_file = out.with_suffix(".stop")
    counts = workload.produce_at_rate(
        spec["props"],
        spec["topics"],
        rate=spec["rate"],
        duration_s=spec["duration_s"],
        size=spec["size"],
        start_seq={(t, p): s for t, p, s in spec["start_seq"]},
        stop=stop_file.exists,
        payload=payload,
    )
    ended_us = time.time_ns() // 1000
    result = {"counts": [[t, p, n] for (t, p), n in counts.items()], "started_us": started_us, "ended_us": ended_us}
    out.write_text(json.dumps(result))


def _read(spec: dict[str, Any], path: Path) -> None:
    stop_file = path.with_suffix(".stop")
    ready_file = path.with_suffix(".ready")
    state: dict[str, float] = {}
    last_check = [0.0]

    def done(distinct: int) -> bool:
        now = time.monotonic()
        if "expected" not in state and now - last_check[0] > 0.2:
            last_check[0] = now
            if stop_file.exists():
                stop = json.loads(stop_file.read_text())
                state["expected"] = stop["expected"]
                state["until"] = now + stop["drain_s"]
        return "expected" in state and (distinct >= state["expected"] or now > state["until"])

    arrivals = reader.read(
        spec["props"],
        spec["topics"],
        done=done,
        deadline_s=spec["deadline_s"],
        on_ready=ready_file.touch,
        ready_topics=spec["ready_topics"],
        isolation_level=spec.get("isolation_level"),
    )
    arrivals.save(path.with_suffix(".out"))


def main(argv: Sequence[str] | None = None) -> None:
    role, spec_path = (argv or sys.argv[1:])[:2]
    path = Path(spec_path)
    spec = json.loads(path.read_text())
    if role == "produce":
        _produce(spec, path.with_suffix(".out"))
    elif role == "read":
        _read(spec, path)
    else:
        raise SystemExit(f"unknown agent role {role!r}: expected produce or read")


if __name__ == "__main__":
    main()
