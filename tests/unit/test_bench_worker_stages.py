"""The latency bench's worker-side figures: stats report windows condensed per stage."""

from __future__ import annotations

from types import SimpleNamespace

from strait.bench.report import _latency_md
from strait.bench.scenarios.latency import broker_cpu_words, broker_pids, stages_words
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


def test_the_brokers_cpu_is_named_per_cluster() -> None:
    assert broker_cpu_words({"source": 71.4, "destination": 48.0}) == "brokers' CPU: source 71 %, destination 48 %"


def test_broker_pids_are_the_running_brokers_of_one_cluster() -> None:
    def cluster(*pids: int | None) -> SimpleNamespace:
        return SimpleNamespace(brokers=[SimpleNamespace(pid=pid) for pid in pids])

    bench = SimpleNamespace(sandbox=SimpleNamespace(clusters={"src": cluster(11, None), "dst": cluster(21, 22)}))
    assert broker_pids(bench, "src") == [11]  # type: ignore[arg-type]
    assert broker_pids(bench, "dst") == [21, 22]  # type: ignore[arg-type]


def test_the_latency_table_shows_the_brokers_cpu_and_a_dash_for_older_results() -> None:
    def run(system: str, **extra: object) -> dict[str, object]:
        return {"rate": 10000.0, "system": system, "latency": {"p50_ms": 8.0, "p99_ms": 40.0}, **extra}

    doc = {
        "runs": [run("strait", broker_cpu_percent={"source": 71.0, "destination": 48.0}), run("mm2")],
        "ratios": [],
    }
    table = "\n".join(_latency_md(doc))
    assert "destination broker CPU" in table
    strait = next(line for line in table.splitlines() if "| Strait |" in line)
    mm2 = next(line for line in table.splitlines() if "| MM2 |" in line)
    assert "| 71 % | 48 % |" in strait
    assert "| — | — |" in mm2
