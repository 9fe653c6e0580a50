"""One Strait worker's copy throughput per security mode, all modes in one run on one sandbox.

The sandbox holds a source and a destination cluster per mode (``src``/``dst`` in plaintext,
``tls-src``/``tls-dst`` in TLS, and so on, see :func:`cluster_pair`); each run copies its own
pre-filled topic from the mode's source to its destination with one worker (the throughput
scenario's harness), the modes alternating so that none always runs first. The result is each
secured mode's records/s and CPU per GB against plaintext's from the same run.

In the modes with ACLs (``sasl_ssl``, ``mtls``) the workload and Strait run as the sandbox's
super user: the least-privilege user cannot write the source topics the benchmark fills, and
which principal passes the ACL check does not change the cost of the encrypted connection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Sequence
from typing import Any

from strait.bench.machine import LoadWatch
from strait.bench.markdown import missing_words
from strait.bench.scenarios.harness import Bench, mean, ratio
from strait.bench.scenarios.throughput import _throughput_run
from strait.sandbox.security import SecurityMode

BASELINE = SecurityMode.PLAINTEXT.value
LANES_ENV = "STRAIT_WORKER__BATCH_PRODUCE_LANES"  # the override of worker.batch_produce_lanes


@contextlib.contextmanager
def produce_lanes(lanes: int | None) -> Iterator[None]:
    """Workers started inside produce over ``lanes`` connections per destination broker in batch
    mode (``None``: Strait's own choice, one)."""
    before = os.environ.pop(LANES_ENV, None)
    if lanes is not None:
        os.environ[LANES_ENV] = str(lanes)
    try:
        yield
    finally:
        os.environ.pop(LANES_ENV, None)
        if before is not None:
            os.environ[LANES_ENV] = before


def parse_lanes(text: str) -> list[int | None]:
    """``default,1``: Strait's own choice and explicit lane counts (positive), no repeats."""
    out: list[int | None] = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        lanes = None if word == "default" else int(word)
        if lanes is not None and lanes < 1:
            raise ValueError(f"produce lanes must be at least 1, got {lanes}")
        if lanes not in out:
            out.append(lanes)
    return out or [None]


def cluster_pair(mode: str) -> tuple[str, str]:
    """The sandbox clusters copied from and to in ``mode``: ``src``/``dst`` for plaintext."""
    return ("src", "dst") if mode == BASELINE else (f"{mode}-src", f"{mode}-dst")


def parse_modes(text: str) -> list[str]:
    """``plaintext,tls``: known modes, plaintext always included (it is the baseline), no repeats."""
    from strait.sandbox.security import mode

    modes = [BASELINE]
    for word in text.split(","):
        if word.strip():
            name = mode(word).value
            if name not in modes:
                modes.append(name)
    if len(modes) < 2:
        raise ValueError("name at least one secured mode to compare with plaintext: tls, sasl_ssl or mtls")
    return modes


def sandbox_layout(modes: Sequence[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """Cluster names and their security modes for a sandbox that serves ``modes``."""
    clusters: list[str] = []
    security: dict[str, str] = {}
    for name in modes:
        for cluster in cluster_pair(name):
            clusters.append(cluster)
            security[cluster] = name
    return tuple(clusters), security


def security(
    bench: Bench,
    *,
    modes: Sequence[str] = (BASELINE, SecurityMode.TLS.value),
    sizes: Sequence[int] = (1024,),
    compression: str = "none",
    records: int = 100_000,
    partitions: int = 4,
    repeats: int = 1,
    timeout_s: float = 600.0,
    copies: Sequence[str | None] = (None,),
    lanes: Sequence[int | None] = (None,),
) -> dict[str, Any]:
    """Copy throughput of one Strait worker in each security mode; ratios against plaintext.

    ``copies``: Strait's route copy modes to run (``None``: the route's default, ``record``,
    ``batch``); each copy mode is compared with plaintext in the same copy mode. ``lanes``: batch
    mode's connections per destination broker (``None``: Strait's default), each compared with
    plaintext at the same setting."""
    runs: list[dict[str, Any]] = []
    with LoadWatch() as overall:
        for repeat in range(repeats):
            for i, size in enumerate(sizes):
                turn = list(modes) if (repeat + i) % 2 == 0 else list(modes)[::-1]
                for name, copy, lane in [(name, copy, lane) for copy in copies for lane in lanes for name in turn]:
                    src, dst = cluster_pair(name)
                    mode_bench = dataclasses.replace(
                        bench,
                        workdir=bench.workdir / name,
                        src_cluster=src,
                        dst_cluster=dst,
                        super_user=SecurityMode(name).authorizes,
                    )
                    bench.log(
                        f"security: {name} copy of {records:,} records of {size} B, {partitions} partitions, "
                        f"one worker{f', copy {copy}' if copy else ''}{f', {lane} produce lanes' if lane else ''}"
                        f" (repeat {repeat + 1}/{repeats})"
                    )
                    with LoadWatch() as load, produce_lanes(lane):
                        run = _throughput_run(
                            mode_bench, "strait", 1, size, compression, records, partitions, timeout_s, copy=copy
                        )
                    run.update(
                        security=name,
                        repeat=repeat,
                        user="admin" if mode_bench.super_user else "strait",
                        load=load.summary(),
                        **({"lanes": lane} if lane is not None else {}),
                    )
                    run.pop("timeline", None)
                    runs.append(run)
                    bench.log(f"  -> {format_run(run)}")
    return {
        "scenario": "security",
        "params": {
            "modes": list(modes),
            "sizes": list(sizes),
            "compression": compression,
            "records": records,
            "partitions": partitions,
            "workers": 1,
            "repeats": repeats,
            "copies": [c or "default" for c in copies],
            "lanes": [lane or "default" for lane in lanes],
        },
        "load": overall.summary(),
        "runs": runs,
        "ratios": security_ratios(runs, modes, sizes, copies, lanes),
    }


def security_ratios(
    runs: Sequence[dict[str, Any]],
    modes: Sequence[str],
    sizes: Sequence[int],
    copies: Sequence[str | None] = (None,),
    lanes: Sequence[int | None] = (None,),
) -> list[dict[str, Any]]:
    """Per record size, copy mode, produce lanes and secured mode: mean records/s and CPU s/GB,
    and their ratio to plaintext's in the same copy mode and lanes (a run without a copy mode
    used the route's default; without lanes, Strait's default)."""
    rows = []
    for size, copy, lane in [(size, copy, lane) for size in sizes for copy in copies for lane in lanes]:

        def avg(
            name: str, metric: str, size: int = size, copy: str | None = copy, lane: int | None = lane
        ) -> float | None:
            return mean(
                [
                    r.get(metric)
                    for r in runs
                    if r.get("security") == name
                    and r.get("size") == size
                    and r.get("copy") == copy
                    and r.get("lanes") == lane
                    and not r.get("error")
                ]
            )

        for name in modes:
            if name == BASELINE:
                continue
            rows.append(
                {
                    "size": size,
                    **({"copy": copy} if copy else {}),
                    **({"lanes": lane} if lane is not None else {}),
                    "security": name,
                    "records_per_s": avg(name, "records_per_s"),
                    "plaintext_records_per_s": avg(BASELINE, "records_per_s"),
                    "records_per_s_ratio": ratio(avg(name, "records_per_s"), avg(BASELINE, "records_per_s")),
                    "cpu_s_per_gb": avg(name, "cpu_s_per_gb"),
                    "plaintext_cpu_s_per_gb": avg(BASELINE, "cpu_s_per_gb"),
                    "cpu_s_per_gb_ratio": ratio(avg(name, "cpu_s_per_gb"), avg(BASELINE, "cpu_s_per_gb")),
                }
            )
    return rows


def format_run(run: dict[str, Any]) -> str:
    load = run.get("load") or {}
    where = f"load 1m {load.get('min_1m')}-{load.get('max_1m')}"
    if run.get("error"):
        return f"FAILED: {run['error']} ({where})"
    return (
        f"{run['records_per_s']:,.0f} rec/s, {run['mb_per_s']:.1f} MB/s, {run['cpu_s_per_gb']:.0f} CPU s/GB, "
        f"{missing_words(run.get('verify', {}))}, dup {run.get('verify', {}).get('duplicated')} ({where})"
    )
