"""The BENCHMARKS.md tables of `strait bench throughput`: every run, then Strait / MM2 ratios per
configuration, Strait copy mode and MirrorMaker 2 profile."""

from __future__ import annotations

from typing import Any

from strait.bench.markdown import VERDICT_HEADER, _n, _table, _verdict


def throughput_md(doc: dict[str, Any]) -> list[str]:
    runs = doc["runs"]
    rows = []
    for r in sorted(
        runs,
        key=lambda r: (
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
    lines = _table(
        [
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
    return lines


def _mm2_profile(run: dict[str, Any]) -> str:
    """MirrorMaker 2's label in a throughput row: with its profile when it is not the default."""
    profile = run.get("mm2_profile", "default")
    return "MM2" if profile == "default" else f"MM2 ({profile})"


def _strait_copy(run: dict[str, Any]) -> str:
    """Strait's label in a throughput row: with its copy mode when the run chose one."""
    return f"Strait ({run['copy']})" if run.get("copy") else "Strait"
