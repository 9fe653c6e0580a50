"""The BENCHMARKS.md section of `strait bench security`: one worker over TLS against plaintext."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strait.bench.markdown import VERDICT_HEADER, _n, _table, _verdict

_METHOD = (
    "Strait alone, one worker, copying a pre-filled topic in full (the throughput section's harness and "
    "formula: records/s from the first to the last record seen on the destination, CPU s/GB of the Strait "
    "processes over the same interval). The sandbox has a source and a destination cluster per security mode "
    "(plaintext, and `tls`: TLS with server authentication; `sasl_ssl`: SCRAM-SHA-512 over TLS; `mtls`: client "
    "certificates), one broker each, brokers replicating over the same listener; the modes alternate in one "
    "invocation, each on its own fresh topic. In the modes with ACLs the run uses the super user (the "
    "least-privilege user cannot fill the source topics). The ratio is the secured mode over plaintext: below 1 "
    "for records/s, above 1 for CPU per GB, is the price of encryption. Load is the machine's 1-minute load "
    "average sampled every 2 s during each run."
)


def _load(run: dict[str, Any]) -> str:
    load = run.get("load") or {}
    if not load:
        return "—"
    return f"{_n(load.get('min_1m'), 1)} to {_n(load.get('max_1m'), 1)}"


def _copy(row: dict[str, Any]) -> str:
    """The copy mode a run or ratio row asked for; "default" when it left the route's own; with
    the batch mode's produce lanes when the run set them (``--produce-lanes``)."""
    copy = str(row.get("copy") or "default")
    return f"{copy}, {row['lanes']} produce lanes" if row.get("lanes") else copy


def render(doc: dict[str, Any]) -> list[str]:
    load = doc.get("load") or {}
    lines = [
        f"Load average during the whole run: 1-minute figure {_n(load.get('min_1m'), 1)} to "
        f"{_n(load.get('max_1m'), 1)} (mean {_n(load.get('mean_1m'), 1)}) on {doc.get('machine', {}).get('cores')} "
        "cores. On a loaded machine a single pair of runs is indicative only: rerun with `--repeats N` on a quiet "
        "machine before quoting the ratio.",
        "",
    ]
    rows = [
        [
            f"{r['size']} B",
            _copy(r),
            r.get("security", "—"),
            str(r.get("repeat", 0) + 1),
            _n(r.get("records")),
            _n(r.get("records_per_s")),
            _n(r.get("mb_per_s"), 1),
            _n(r.get("cpu_s_per_gb")),
            _load(r),
            _verdict(r),
        ]
        for r in sorted(
            doc.get("runs", []), key=lambda r: (r["size"], _copy(r), r.get("security", ""), r.get("repeat", 0))
        )
    ]
    lines += _table(
        ["record", "copy", "security", "run", "records", "records/s", "MB/s", "CPU s/GB", "load 1m", VERDICT_HEADER],
        rows,
    )
    lines += ["", "Secured mode / plaintext in the same copy mode (means over the runs):", ""]
    lines += _table(
        ["record", "copy", "security", "records/s", "plaintext records/s", "ratio", "CPU s/GB ratio"],
        [
            [
                f"{q['size']} B",
                _copy(q),
                q["security"],
                _n(q.get("records_per_s")),
                _n(q.get("plaintext_records_per_s")),
                _n(q.get("records_per_s_ratio"), 2),
                _n(q.get("cpu_s_per_gb_ratio"), 2),
            ]
            for q in doc.get("ratios", [])
        ],
    )
    return lines


SECURITY_SECTION: tuple[str, str, Callable[[dict[str, Any]], list[str]]] = (
    "Security: one worker over TLS against plaintext",
    _METHOD,
    render,
)
