"""The BENCHMARKS.md tables of `strait bench latency`: every run with its distance from the floor,
the floor itself, then Strait / MM2 ratios per rate."""

from __future__ import annotations

from typing import Any

from strait.bench.markdown import VERDICT_HEADER, _n, _table, _verdict
from strait.bench.report_payload import payload_kind, payload_lines


def latency_md(doc: dict[str, Any]) -> list[str]:
    floors = _floor_means(doc)
    lines = payload_lines(doc.get("params", {}))
    rows = []
    for r in sorted(
        doc["runs"],
        key=lambda r: (r["rate"], payload_kind(r), r["system"], r.get("copy") or "", r.get("repeat", 0)),
    ):
        lat = r.get("latency", {})
        floor = floors.get(r["rate"], {})
        rows.append(
            [
                _n(r["rate"]),
                payload_kind(r),
                ("Strait" + (f" ({r['copy']})" if r.get("copy") else "")) if r["system"] == "strait" else "MM2",
                str(r.get("repeat", 0) + 1),
                _n(r.get("achieved_rate")),
                _n(lat.get("p50_ms"), 1),
                _n(lat.get("p99_ms"), 1),
                _n(lat.get("p999_ms"), 1),
                _n(lat.get("max_ms"), 1),
                over_floor_words(lat.get("p50_ms"), floor.get("p50_ms")),
                over_floor_words(lat.get("p99_ms"), floor.get("p99_ms")),
                _n(r.get("cpu_percent"), 0, " %"),
                _n(r.get("broker_cpu_percent", {}).get("source"), 0, " %"),
                _n(r.get("broker_cpu_percent", {}).get("destination"), 0, " %"),
                _verdict(r),
            ]
        )
    lines += _table(
        [
            "target rec/s",
            "payload",
            "system",
            "run",
            "achieved rec/s",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "p50 over floor",
            "p99 over floor",
            "replicator CPU",
            "source broker CPU",
            "destination broker CPU",
            VERDICT_HEADER,
        ],
        rows,
    )
    lines += floor_md(doc)
    lines += ["", "Ratios Strait / MM2 (lower is better for Strait), and each system's mean above the floor:", ""]
    lines += _table(
        [
            "rate",
            "payload",
            "p50 ratio",
            "p99 ratio",
            "p99.9 ratio",
            "p50, best runs",
            "p99, best runs",
            "p99.9, best runs",
            "floor p50 / p99 ms",
            "Strait over floor p50 / p99 ms",
            "MM2 over floor p50 / p99 ms",
        ],
        [
            [
                _n(q["rate"]) + (f" ({q['copy']})" if q.get("copy") else ""),
                payload_kind(q),
                *(
                    _n(q.get(k), 2)
                    for k in ("p50_ms", "p99_ms", "p999_ms", "best_p50_ms", "best_p99_ms", "best_p999_ms")
                ),
                f"{_n(q.get('floor_p50_ms'), 1)} / {_n(q.get('floor_p99_ms'), 1)}",
                *(
                    f"{_signed(q.get(f'{s}_over_floor_p50_ms'))} / {_signed(q.get(f'{s}_over_floor_p99_ms'))}"
                    for s in ("strait", "mm2")
                ),
            ]
            for q in doc["ratios"]
        ],
    )
    return lines


def floor_md(doc: dict[str, Any]) -> list[str]:
    """The floor's runs: one produce and one fetch per cluster at each rate, and Kafka's own tool;
    nothing for a result without a floor."""
    floor = doc.get("floor")
    if not floor:
        return []
    lines = [
        "",
        "Floor on this machine, no replicator (what the p50 / p99 over floor columns subtract: the mean of "
        "the runs at the same rate). One produce + one fetch on each cluster: the benchmark's producer and "
        "reader at the same rate on a topic of the source, then on one of the destination; a "
        "replicated record makes both hops, so both hops together are its latency with a replicator that adds "
        "no time (percentiles of the sum of independent draws from the two hops' latencies).",
        "",
    ]
    lines += _table(
        [
            "rate",
            "run",
            "source hop p50 / p99 ms",
            "destination hop p50 / p99 ms",
            "both hops p50 ms",
            "p99 ms",
            "p99.9 ms",
            "not read",
        ],
        [
            [
                _n(h.get("rate")),
                str(h.get("repeat", 0) + 1),
                *(_hop_words(h.get(role) or {}) for role in ("source", "destination")),
                *(
                    (_n(h.get("latency", {}).get(k), 1) for k in ("p50_ms", "p99_ms", "p999_ms"))
                    if not h.get("error")
                    else [f"failed: {h['error'][:120]}", "—", "—"]
                ),
                _n(sum((h.get(role) or {}).get("missing", 0) for role in ("source", "destination"))),
            ]
            for h in sorted(floor.get("hops", []), key=lambda h: (h.get("rate", 0), h.get("repeat", 0)))
        ],
    )
    tools = floor.get("end_to_end") or []
    if tools:
        first = tools[0]
        lines += [
            "",
            f"Kafka's own end-to-end latency tool (`{first.get('tool', 'EndToEndLatency')}`) on the source: "
            f"{_n(first.get('records'))} records of {_n(first.get('size'))} B, one at a time (send, acks=all, "
            "then read back by a consumer polling with no fetch wait), so at no rate; percentiles in whole "
            "milliseconds (truncated) as the tool prints them, its JVM's warm-up included.",
            "",
        ]
        lines += _table(
            ["run", "mean ms", "p50 ms", "p99 ms", "p99.9 ms"],
            [
                [str(t.get("repeat", 0) + 1)]
                + (
                    [_n(t["latency"].get(k), 1 if k == "mean_ms" else 0) for k in ("mean_ms", "p50_ms", "p99_ms")]
                    + [_n(t["latency"].get("p999_ms"))]
                    if t.get("latency")
                    else [f"failed: {t.get('error', '')[:120]}", "—", "—", "—"]
                )
                for t in tools
            ],
        )
    return lines


def over_floor_words(value: float | None, floor: float | None) -> str:
    """``+2.1 (1.8x)``: how far a figure is above the floor, in ms and as a multiple of it."""
    if value is None or floor is None:
        return "—"
    multiple = f" ({_n(value / floor, 1)}x)" if floor > 0 else ""
    return _signed(value - floor) + multiple


def _signed(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:+,.1f}"


def _hop_words(hop: dict[str, Any]) -> str:
    return f"{_n(hop.get('p50_ms'), 1)} / {_n(hop.get('p99_ms'), 1)}" if hop.get("count") else "—"


def _floor_means(doc: dict[str, Any]) -> dict[float, dict[str, float]]:
    """The floor's mean p50 / p99 per rate (one produce + one fetch on each cluster)."""
    by_rate: dict[float, list[dict[str, Any]]] = {}
    for hop in (doc.get("floor") or {}).get("hops", []):
        if hop.get("latency", {}).get("count"):
            by_rate.setdefault(hop["rate"], []).append(hop["latency"])
    return {
        rate: {q: sum(f[q] for f in figures) / len(figures) for q in ("p50_ms", "p99_ms")}
        for rate, figures in by_rate.items()
    }


def floor_summary(doc: dict[str, Any]) -> str:
    """The floor in the summary line: per rate both hops' p50 / p99, and Kafka's tool; "" without one."""
    means = _floor_means(doc)
    if not means:
        return ""
    words = "; floor (one produce + one fetch on each cluster) " + ", ".join(
        f"at {_n(rate)}/s p50 {_n(f['p50_ms'], 1)} ms, p99 {_n(f['p99_ms'], 1)} ms" for rate, f in sorted(means.items())
    )
    tools = [t["latency"] for t in (doc.get("floor") or {}).get("end_to_end", []) if t.get("latency")]
    if tools:
        words += (
            f"; Kafka's EndToEndLatency (one record at a time) p50 {_n(tools[0]['p50_ms'])} ms, "
            f"p99 {_n(tools[0]['p99_ms'])} ms"
        )
    return words
