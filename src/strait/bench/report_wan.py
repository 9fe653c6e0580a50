"""The BENCHMARKS.md section of `strait bench wan`: both systems with the source cluster D ms away."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strait.bench.markdown import VERDICT_HEADER, _n, _table, _verdict
from strait.bench.mirrormaker import MM2_PROFILES

_METHOD = (
    "The throughput copy (a pre-filled topic copied in full, records/s from the first to the last record at the "
    "destination) with the source cluster a round trip of D ms away. Both systems reach the source only through "
    "Toxiproxy: one proxy per source broker, in front of a second listener the broker advertises at the proxy's "
    "port, so every connection a client opens from metadata crosses it; the delay is two `latency` toxics, half "
    "of the round trip on the way to the broker and half on the way back. The destination, Strait's coordination "
    "and the workload stay local, as for a disaster-recovery copy run next to its destination. D = 0 runs through "
    'the same proxies without a toxic, so "kept" (records/s at D over records/s at 0 of the same system) '
    "measures the delay, not the proxy. The proxy holds every request for its round trip however many are in "
    "flight, but it does not model a long link's TCP window (each connection stays on loopback): socket-buffer "
    "limits of a real link do not show here. MirrorMaker 2 runs the profile named in the table (`wan`: the "
    "`tuned` settings plus "
    + ", ".join(
        f"`{key}={value}`" for key, value in MM2_PROFILES["wan"].items() if MM2_PROFILES["tuned"].get(key) != value
    )
    + ")."
)


def _system(row: dict[str, Any]) -> str:
    if row["system"] == "strait":
        return f"Strait ({row.get('copy') or 'default'})"
    return f"MM2 ({row.get('mm2_profile', 'default')})"


def render(doc: dict[str, Any]) -> list[str]:
    params = doc.get("params", {})
    lines = [
        f"{_n(params.get('records'))} records of {_n(params.get('size'))} B ({params.get('compression')}), "
        f"{_n(params.get('partitions'))} partitions, {_n(params.get('parallelism'))} Strait worker(s) = "
        f"MirrorMaker task(s); link: {params.get('link', {}).get('tool', '—')}.",
        "",
    ]
    rows = [
        [
            _n(r.get("delay_ms")),
            _system(r),
            str(r.get("repeat", 0) + 1),
            _n(r.get("records_per_s")),
            _n(r.get("mb_per_s"), 1),
            _n(r.get("cpu_s_per_gb")),
            _n(r.get("startup_s"), 1),
            _verdict(r),
        ]
        for r in sorted(doc.get("runs", []), key=lambda r: (r.get("delay_ms", 0), _system(r), r.get("repeat", 0)))
    ]
    lines += _table(
        ["round trip ms", "system", "run", "records/s", "MB/s", "CPU s/GB", "start-up s", VERDICT_HEADER], rows
    )
    lines += ["", "Means over the runs; kept = records/s at this delay / at 0 ms, same system:", ""]
    lines += _table(
        [
            "round trip ms",
            "Strait",
            "MM2",
            "Strait records/s",
            "MM2 records/s",
            "Strait / MM2",
            "Strait kept",
            "MM2 kept",
        ],
        [
            [
                _n(q.get("delay_ms")),
                str(q.get("copy") or "default"),
                str(q.get("mm2_profile")),
                _n(q.get("strait_records_per_s")),
                _n(q.get("mm2_records_per_s")),
                _n(q.get("records_per_s"), 2),
                _n(q.get("strait_kept"), 2),
                _n(q.get("mm2_kept"), 2),
            ]
            for q in doc.get("ratios", [])
        ],
    )
    return lines


def wan_summary(doc: dict[str, Any] | None) -> list[str]:
    """The summary line: at the longest delay, Strait / MM2 and how much of its 0 ms rate each kept."""
    if not doc or not doc.get("ratios"):
        return []
    longest = max(q["delay_ms"] for q in doc["ratios"])
    parts = [
        f"Strait ({q.get('copy') or 'default'}) / MM2 ({q.get('mm2_profile')}) {_n(q.get('records_per_s'), 2)}, "
        f"kept {_n(q.get('strait_kept'), 2)} vs {_n(q.get('mm2_kept'), 2)} of their 0 ms records/s"
        for q in doc["ratios"]
        if q["delay_ms"] == longest
    ]
    return [f"- **Across a WAN** (source {_n(longest)} ms round trip away, records/s): " + "; ".join(parts) + "."]


WAN_SECTION: tuple[str, str, Callable[[dict[str, Any]], list[str]]] = (
    "Across a WAN: the source cluster D ms away",
    _METHOD,
    render,
)
