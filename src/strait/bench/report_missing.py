"""What BENCHMARKS.md says about records missing from a copy: lost, or not yet copied, per system."""

from __future__ import annotations

from typing import Any

from strait.bench.markdown import _n, missing_of, split_of

MISSING_TERMS = (
    "A record the reader had not found when a run's window closed is **lost** if the replicator's committed "
    "position on its source partition (Strait: the route's checkpoint; MirrorMaker 2: the source offset its "
    "Connect worker committed, from its offsets topic) is past it and the destination still lacks it when read "
    "again afterwards: no restart will copy it. Otherwise it is **not yet copied**: the replicator, or its "
    "successor after a restart, still copies it. Both are counted; only lost records are data loss."
)

_NAMES = {"strait": "Strait", "mm2": "MM2"}


def missing_summary(results: dict[str, dict[str, Any]]) -> list[str]:
    """The summary lines on missing records over every verified run, per system."""
    lost: dict[str, int] = {}
    pending: dict[str, int] = {}
    unsplit: dict[str, int] = {}
    runs = 0
    for doc in results.values():
        for run in doc.get("runs", []):
            v = run.get("verify") or {}
            if not isinstance(missing_of(v), int):
                continue
            runs += 1
            system = str(run.get("system", "strait"))
            split_lost, split_pending = split_of(v)
            if isinstance(split_lost, int):
                lost[system] = lost.get(system, 0) + split_lost
                pending[system] = pending.get(system, 0) + int(split_pending or 0)
            else:  # written before the split (its "lost" was every missing record), or positions unread
                unsplit[system] = unsplit.get(system, 0) + int(missing_of(v))
    if not runs:
        return []

    def per_system(counts: dict[str, int]) -> str:
        return ", ".join(f"{_NAMES.get(s, s)} {_n(counts[s])}" for s in sorted(counts, key=lambda s: s != "strait"))

    lines = []
    if lost or pending:
        lines.append(
            f"- **Records lost** (the committed position moved past them and they never arrived), over the "
            f"{runs} verified runs: {per_system(lost)}; **not yet copied** when the window closed (a restart "
            f"from the committed position still copies them): {per_system(pending)}."
        )
    if unsplit:
        lines.append(
            f"- **Records missing, not split** into lost and not yet copied (results written before the split, "
            f"or the committed positions could not be read): {per_system(unsplit)}."
        )
    return lines
