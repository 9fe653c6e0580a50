"""PNG plots beside the benchmark results, for the scenarios where a curve says more than a table."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(doc: dict[str, Any], results_dir: Path) -> Path | None:
    """A PNG for scenarios where a curve says more than a table; None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    scenario = doc["scenario"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = {"strait": "tab:blue", "mm2": "tab:orange"}
    label = {"strait": "Strait", "mm2": "MirrorMaker 2"}
    if scenario == "throughput":
        ratios = doc["ratios"]
        xs = range(len(ratios))
        width = 0.4
        for i, system in enumerate(("strait", "mm2")):
            values = [q.get(f"{system}_records_per_s") or 0 for q in ratios]
            ax.bar([x + (i - 0.5) * width for x in xs], values, width, label=label[system], color=colors[system])
        several = len({q.get("payload", "filler") for q in ratios}) > 1
        ticks = [
            f"{q['size']} B\n{q['compression']}\nx{q['parallelism']}\n"
            f"{q.get('copy', 'record')}/{q.get('mm2_profile', 'default')}"
            + (f"\n{q.get('payload', 'filler')}" if several else "")
            for q in ratios
        ]
        ax.set_xticks(list(xs), ticks, fontsize=7)
        ax.set_ylabel("records/s")
        ax.set_title("Throughput of a full copy (higher is better)")
    elif scenario == "latency":
        kinds = {r.get("payload", "filler") for r in doc["runs"]}
        for run in doc["runs"]:
            points = run.get("cdf_ms") or []
            if points:
                style = "-" if run["rate"] == min(r["rate"] for r in doc["runs"]) else "--"
                # Several payload kinds: each curve names its own.
                kind = f" ({run.get('payload', 'filler')})" if len(kinds) > 1 else ""
                ax.plot(
                    [p[1] for p in points],
                    [p[0] for p in points],
                    style,
                    color=colors[run["system"]],
                    alpha=1.0 if not kind or run.get("payload") == doc["params"]["payloads"][0] else 0.5,
                    label=f"{label[run['system']]} @ {run['rate']:,.0f}/s{kind}",
                )
        ax.set_xscale("log")
        ax.set_xlabel("end-to-end latency (ms, log)")
        ax.set_ylabel("percentile")
        ax.set_title("Latency distribution")
    elif scenario in ("add-topics", "worker-failure"):
        key = "rate_a" if scenario == "add-topics" else "rate_series"
        for run in doc["runs"]:
            series = run.get(key) or []
            if series:
                ax.plot(
                    [p[0] for p in series],
                    [p[1] for p in series],
                    color=colors[run["system"]],
                    label=label[run["system"]],
                    linewidth=1,
                )
        ax.axvline(0, color="grey", linestyle=":")
        ax.set_xlabel("seconds after " + ("the topics were added" if scenario == "add-topics" else "the kill -9"))
        ax.set_ylabel("records/s arriving" + (" on topic A" if scenario == "add-topics" else ""))
        ax.set_title("Arrivals at the destination")
    else:
        plt.close(fig)
        return None
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = results_dir / f"{scenario}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
