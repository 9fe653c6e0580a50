"""The BENCHMARKS.md tables of `strait bench throughput`: the record bodies, every run, then
Strait / MM2 ratios per payload kind, configuration, Strait copy mode and MirrorMaker 2 profile."""

from __future__ import annotations

from typing import Any

from strait.bench.markdown import VERDICT_HEADER, _n, _table, _verdict
from strait.bench.report_payload import payload_kind, payload_lines


def throughput_md(doc: dict[str, Any]) -> list[str]:
    runs = [r for r in doc["runs"] if r["system"] != "ceiling"]
    rows = []
    for r in sorted(
        runs,
        key=lambda r: (
            payload_kind(r),
            r["size"],
            r["compression"],
            r["parallelism"],
            r["system"],
            r.get("copy", ""),
            r.get("mm2_profile", ""),
            r.get("repeat", 0),
        ),
    ):
        rows.append(
            [
                payload_kind(r),
                f"{r['size']} B",
                r["compression"],
                str(r["parallelism"]),
                _strait_copy(r) if r["system"] == "strait" else _mm2_profile(r),
                str(r.get("repeat", 0) + 1),
                _n(r.get("records")),
                _n(r.get("records_per_s")),
                _n(r.get("mb_per_s"), 1),
                _n(r.get("cpu_s_per_gb")),
                _n(r.get("peak_rss_mb")),
                _n(r.get("startup_s"), 1),
                _verdict(r),
            ]
        )
    lines = payload_lines(doc.get("params", {}))
    lines += _table(
        [
            "payload",
            "record",
            "compr.",
            "workers / tasks",
            "system",
            "run",
            "records",
            "records/s",
            "MB/s",
            "CPU s/GB",
            "peak RSS MB",
            "start-up s",
            VERDICT_HEADER,
        ],
        rows,
    )
    ratio_rows = [
        [
            payload_kind(q),
            f"{q['size']} B",
            q["compression"],
            str(q["parallelism"]),
            q.get("copy", "record"),
            q.get("mm2_profile", "default"),
            _n(q.get("strait_records_per_s")),
            _n(q.get("mm2_records_per_s")),
            _n(q.get("records_per_s"), 2),
            _n(q.get("best_records_per_s"), 2),
            _n(q.get("cpu_s_per_gb"), 2),
            _n(q.get("peak_rss_mb"), 2),
        ]
        for q in doc["ratios"]
    ]
    lines += ["", "Ratios Strait / MM2 (records/s: higher is better for Strait; CPU and memory: lower is better):", ""]
    lines += _table(
        [
            "payload",
            "record",
            "compr.",
            "workers / tasks",
            "Strait copy",
            "MM2 profile",
            "Strait rec/s",
            "MM2 rec/s",
            "records/s ratio (means)",
            "records/s ratio (best runs)",
            "CPU s/GB ratio",
            "peak RSS ratio",
        ],
        ratio_rows,
    )
    return lines + ceiling_md(doc["runs"])


def ceiling_md(runs: list[dict[str, Any]]) -> list[str]:
    """The ceiling runs (strait.bench.ceiling), each with every system's mean records/s at the
    same record size and codec (one worker / task) as a share of it; nothing without them."""
    ceilings = [r for r in runs if r["system"] == "ceiling"]
    if not ceilings:
        return []
    copies = [r for r in runs if r["system"] != "ceiling" and r.get("parallelism") == 1 and not r.get("error")]
    labels = sorted({_label(r) for r in copies})
    rows = []
    for c in sorted(ceilings, key=lambda r: (payload_kind(r), r["size"], r["compression"], r.get("repeat", 0))):
        shares = []
        config = (payload_kind(c), c["size"], c["compression"])
        for label in labels:
            rates = [
                r["records_per_s"]
                for r in copies
                if _label(r) == label and (payload_kind(r), r["size"], r["compression"]) == config
            ]
            ceiling = c.get("records_per_s")
            shares.append(_n(sum(rates) / len(rates) / ceiling, 2) if rates and ceiling else "—")
        rows.append(
            [
                payload_kind(c),
                f"{c['size']} B",
                c["compression"],
                str(c.get("repeat", 0) + 1),
                _n((c.get("write") or {}).get("records_per_s")),
                _n((c.get("read") or {}).get("records_per_s")),
                _n(c.get("records_per_s")) if not c.get("error") else f"failed: {c['error'][:120]}",
                _n(c.get("cpu_s_per_gb")),
                *shares,
            ]
        )
    lines = [
        "",
        "Ceiling: Kafka's own `ProducerPerformance` writing and `ConsumerPerformance` reading the same "
        "number of records of the same payload kind, size and codec at once on the same clusters, no replicator "
        "between "
        "(producer and consumer with the tuned profile's settings, acks=all); the slower of the two bounds "
        "any copy that decodes and re-encodes records on this machine (a copy of whole batches re-encodes "
        "nothing and can pass it). Their CPU is each tool's whole life, JVM start-up included. Then each "
        "system's mean records/s (one worker / task) as a share of that ceiling:",
        "",
    ]
    return lines + _table(
        ["payload", "record", "compr.", "run", "write rec/s", "read rec/s", "ceiling rec/s", "tools' CPU s/GB"]
        + [f"{label} / ceiling" for label in labels],
        rows,
    )


def _label(run: dict[str, Any]) -> str:
    return _strait_copy(run) if run["system"] == "strait" else _mm2_profile(run)


def _mm2_profile(run: dict[str, Any]) -> str:
    """MirrorMaker 2's label in a throughput row: with its profile when it is not the default."""
    profile = run.get("mm2_profile", "default")
    return "MM2" if profile == "default" else f"MM2 ({profile})"


def _strait_copy(run: dict[str, Any]) -> str:
    """Strait's label in a throughput row: with its copy mode when the run chose one."""
    return f"Strait ({run['copy']})" if run.get("copy") else "Strait"
