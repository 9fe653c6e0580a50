"""Markdown building blocks shared by the benchmark reports (BENCHMARKS.md, RELIABILITY.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _n(value: Any, digits: int = 0, suffix: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, int | float):
        return f"{value:,.{digits}f}{suffix}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


# The column every benchmark table ends with: the verifier's verdict on the run.
VERDICT_HEADER = "lost / not yet copied / dup / reordered"


def _verdict(run: dict[str, Any]) -> str:
    if run.get("error"):
        return f"failed: {run['error'][:120]}"
    v = run.get("verify") or {}
    if not v:
        return "—"
    lost, pending = split_of(v)
    if lost is None:
        return f"{missing_of(v)} missing, not split / {v.get('duplicated')} / {v.get('out_of_order')}"
    return f"{lost} / {pending} / {v.get('duplicated')} / {v.get('out_of_order')}"


def missing_of(v: dict[str, Any]) -> Any:
    """Records missing from the copy. Results written before the split have no "missing": their
    "lost" counted every missing record."""
    return v["missing"] if "missing" in v else v.get("lost")


def split_of(v: dict[str, Any]) -> tuple[Any, Any]:
    """(lost, not yet copied) of a verdict; (None, None) when its missing records were not split.
    Nothing missing needs no split: (0, 0)."""
    if missing_of(v) == 0:
        return 0, 0
    if "missing" not in v:
        return None, None
    return v.get("lost"), v.get("not_yet_copied")


def missing_words(v: dict[str, Any]) -> str:
    """The verdict's missing records in words, for progress lines: "lost 0, not yet copied 12"."""
    lost, pending = split_of(v)
    if lost is None:
        return f"missing {missing_of(v)} (not split into lost / not yet copied)"
    return f"lost {lost}, not yet copied {pending}"
