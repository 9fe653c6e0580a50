"""The latency bench's worker-side figures: stats report windows condensed per stage."""

from __future__ import annotations

from strait.bench.scenarios.latency import stages_words
from strait.bench.worker_stages import summarize, windows_of


def report(updated: float, e2e: tuple[int, float, float], ack: tuple[int, float, float]) -> dict[str, object]:
    def figures(f: tuple[int, float, float]) -> dict[str, object]:
        return {"count": f[0], "p50_s": f[1], "p99_s": f[2]}

    return {
        "updated": updated,
        "partitions": {},
        "latency": {"bench": figures(e2e)},
        "stages": {"bench": {"produce_ack": figures(ack), "queued": {"count": 0, "p50_s": None, "p99_s": None}}},
    }


def test_windows_inside_the_measured_interval_are_condensed_per_stage() -> None:
    windows = [
        *windows_of("w1", report(99.0, (100, 0.500, 0.900), (100, 0.400, 0.800))),  # warm-up: left out
        *windows_of("w1", report(102.0, (1000, 0.010, 0.080), (1000, 0.004, 0.060))),
        *windows_of("w1", report(104.0, (3000, 0.012, 0.040), (3000, 0.005, 0.030))),
        *windows_of("w1", report(106.0, (1000, 0.020, 0.120), (1000, 0.006, 0.100))),
        *windows_of("w1", report(200.0, (10, 0.300, 0.300), (10, 0.300, 0.300))),  # after the run
    ]
    stages = summarize(windows, after=100.0, before=110.0)
    assert stages["e2e"] == {"windows": 3, "count": 5000, "p50_ms": 12.0, "p99_ms": 80.0, "p99_max_ms": 120.0}
    assert stages["produce_ack"]["p50_ms"] == 5.0  # the count-weighted median of the windows' p50s
    assert "queued" not in stages  # a stage without records in its windows says nothing
    assert stages_words(stages) == ("e2e 12.0/80.0 ms (p99 max 120.0), produce_ack 5.0/60.0 ms (p99 max 100.0)")


def test_a_report_without_latency_figures_gives_no_window() -> None:
    assert windows_of("w1", {"updated": 1.0, "partitions": {}}) == []
    assert summarize([], after=0.0, before=1.0) == {}
