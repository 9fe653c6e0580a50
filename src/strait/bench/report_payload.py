"""The record bodies a throughput or latency result was measured with, in words for BENCHMARKS.md."""

from __future__ import annotations

from typing import Any

from strait.bench.markdown import _n
from strait.bench.records import RATIO_BATCH_BYTES, compression_ratios

_KINDS = {
    "json": "generated JSON events (event type, ids, timestamps, amounts, short strings, line items)",
    "filler": "one repeated text in every record",
}


def payload_kind(run: dict[str, Any]) -> str:
    """A run's payload kind: results written before there were kinds carried filler."""
    return str(run.get("payload", "filler"))


def payload_lines(params: dict[str, Any]) -> list[str]:
    """One sentence per payload kind of a result with its measured compression ratio per codec
    and record size. Results written before there were kinds carried filler, whose bytes have not
    changed since: its ratio is measured here for their record sizes."""
    kinds = params.get("payloads") or ["filler"]
    measured = params.get("payload_compression") or {}
    sizes = params.get("sizes") or [params["size"]] if "sizes" in params or "size" in params else []
    parts = []
    for i, kind in enumerate(kinds):
        role = "headline" if i == 0 and len(kinds) > 1 else "extra rows" if i else ""
        ratios = measured.get(kind) or {}
        if not ratios and kind == "filler":
            ratios = {str(size): compression_ratios(kind, size) for size in sizes}
        figures = "; ".join(
            f"{size} B " + ", ".join(f"{codec} {_n(value, 1)}x" for codec, value in sorted(codecs.items()))
            for size, codecs in ratios.items()
        )
        parts.append(
            f"`{kind}`{' (' + role + ')' if role else ''}, {_KINDS.get(kind, kind)}: "
            + (f"raw / compressed {figures}" if figures else "compression not measured")
        )
    return [
        "Payload (each record's body after its 24-byte stamp): "
        + ". ".join(parts)
        + f" (compressed in {RATIO_BATCH_BYTES // 1024} KB batches of consecutive records, with the codecs of "
        "Kafka's clients).",
        "",
    ]
