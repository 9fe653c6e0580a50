"""Across a WAN: the throughput copy with the source cluster a round trip of D ms away.

Both systems reach the source only through a delayed link (:mod:`strait.bench.delayed_link`:
Toxiproxy in front of the source brokers' proxied listener, half the round trip each way); the
destination, Strait's coordination and the workload stay local, as for a disaster-recovery copy
run next to its destination. Delay 0 goes through the same proxies with no toxic, so the ratio
"with delay / without" measures the delay, not the proxy. Each run is the throughput scenario's
(:func:`strait.bench.scenarios.throughput._throughput_run`): a pre-filled topic copied in full,
timed from the first to the last record at the destination, then verified.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from strait.bench.delayed_link import DelayedLink
from strait.bench.mirrormaker import profile_properties
from strait.bench.scenarios.harness import Bench, mean, ratio
from strait.bench.scenarios.throughput import _fmt_throughput, _systems, _throughput_run


def wan(
    bench: Bench,
    link: DelayedLink,
    *,
    delays_ms: Sequence[int] = (0, 50, 100),
    size: int = 1024,
    compression: str = "none",
    records: int = 200_000,
    partitions: int = 8,
    parallelism: int = 1,
    repeats: int = 1,
    copies: Sequence[str | None] = (None,),
    mm2_profiles: Sequence[str] = ("wan",),
    timeout_s: float = 600.0,
    warm_records: int = 0,
) -> dict[str, Any]:
    """Copy a pre-filled topic at each round-trip delay, both systems on the same link.

    ``link``: started, in front of every source broker; ``bench.replicator_source`` must be its
    bootstrap. ``copies``: Strait's route copy modes (None: the route's default);
    ``mm2_profiles``: MirrorMaker 2's settings (:data:`strait.bench.mirrormaker.MM2_PROFILES`).
    ``warm_records``: first an unmeasured copy of that many records at 0 ms (0: none), since the
    first copies on freshly started brokers ran at half the speed of later ones.
    """
    for name in mm2_profiles:
        profile_properties(name)  # an unknown profile fails before any run
    if any(d < 0 for d in delays_ms):
        raise ValueError("delays are 0 ms or more")
    if warm_records:
        link.set_delay(0)
        system = bench.active_systems()[0]
        bench.log(f"wan: warming the brokers with an unmeasured {system} copy of {warm_records:,} records")
        warm = _throughput_run(bench, system, parallelism, size, compression, warm_records, partitions, timeout_s)
        bench.log(f"  -> (unmeasured) {_fmt_throughput(warm)}")
    runs: list[dict[str, Any]] = []
    for repeat in range(repeats):
        # The first runs on fresh brokers are slower: alternate which delay they fall on.
        for delay in delays_ms if repeat % 2 == 0 else list(reversed(delays_ms)):
            link.set_delay(delay)
            for system, copy, profile in _systems(bench.order(repeat), copies, mm2_profiles):
                mode = f" copy {copy or 'default'}" if system == "strait" else f" profile {profile}"
                bench.log(
                    f"wan: {system}{mode} x{parallelism}, source {delay} ms away, {records:,} records of {size} B, "
                    f"compression {compression} (repeat {repeat + 1}/{repeats})"
                )
                run = _throughput_run(
                    bench,
                    system,
                    parallelism,
                    size,
                    compression,
                    records,
                    partitions,
                    timeout_s,
                    copy=copy,
                    mm2_profile=profile,
                )
                run["delay_ms"] = delay
                run["repeat"] = repeat
                runs.append(run)
                bench.log(f"  -> {_fmt_throughput(run)}")
    return {
        "scenario": "wan",
        "params": {
            "delays_ms": list(delays_ms),
            "size": size,
            "compression": compression,
            "records": records,
            "partitions": partitions,
            "parallelism": parallelism,
            "repeats": repeats,
            "copies": [c or "default" for c in copies],
            "mm2_profiles": list(mm2_profiles),
            "mm2_profile_settings": {p: profile_properties(p) for p in mm2_profiles},
            "warm_records": warm_records,
            "link": link.describe(),
        },
        "runs": runs,
        "ratios": wan_ratios(runs, delays_ms, copies, mm2_profiles),
    }


def _variant(run: dict[str, Any]) -> tuple[str, str | None]:
    """A run's system and setting: Strait's copy mode (None: the default) or MM2's profile."""
    if run["system"] == "strait":
        return "strait", run.get("copy")
    return "mm2", run.get("mm2_profile", "default")


def records_per_s(runs: Sequence[dict[str, Any]], system: str, setting: str | None, delay: int) -> float | None:
    """Mean records/s over the repeats of one system and setting at one delay (failed runs left out)."""
    return mean(
        [
            r.get("records_per_s")
            for r in runs
            if _variant(r) == (system, setting) and r.get("delay_ms") == delay and not r.get("error")
        ]
    )


def wan_ratios(
    runs: Sequence[dict[str, Any]],
    delays_ms: Sequence[int],
    copies: Sequence[str | None],
    profiles: Sequence[str],
) -> list[dict[str, Any]]:
    """Per delay, Strait copy mode and MM2 profile: each system's mean records/s, Strait / MM2, and
    each system's records/s at that delay over its own at 0 ms (None where 0 ms was not run)."""
    rows = []
    for delay in delays_ms:
        for copy in copies:
            for profile in profiles:
                strait = records_per_s(runs, "strait", copy, delay)
                mm2 = records_per_s(runs, "mm2", profile, delay)
                strait_0 = records_per_s(runs, "strait", copy, 0)
                mm2_0 = records_per_s(runs, "mm2", profile, 0)
                rows.append(
                    {
                        "delay_ms": delay,
                        "copy": copy,
                        "mm2_profile": profile,
                        "strait_records_per_s": strait,
                        "mm2_records_per_s": mm2,
                        "records_per_s": ratio(strait, mm2),
                        "strait_kept": ratio(strait, strait_0),
                        "mm2_kept": ratio(mm2, mm2_0),
                    }
                )
    return rows
