"""`strait bench security`: modes, the sandbox it asks for, ratios against plaintext, its report."""

from __future__ import annotations

import os
from typing import Any

import pytest

from strait.bench import report
from strait.bench.scenarios.security import (
    LANES_ENV,
    cluster_pair,
    parse_lanes,
    parse_modes,
    produce_lanes,
    sandbox_layout,
    security_ratios,
)
from strait.sandbox import SandboxSpec
from strait.sandbox.errors import SandboxError


def test_plaintext_is_always_the_baseline_and_modes_are_checked() -> None:
    assert parse_modes("tls") == ["plaintext", "tls"]
    assert parse_modes("TLS, mtls,tls,plaintext") == ["plaintext", "tls", "mtls"]
    with pytest.raises(ValueError, match="at least one secured mode"):
        parse_modes("plaintext")
    with pytest.raises(SandboxError, match="unknown security mode"):
        parse_modes("ssl")


def test_each_mode_gets_its_own_pair_of_clusters_in_one_valid_sandbox() -> None:
    names, modes = sandbox_layout(["plaintext", "tls", "sasl_ssl"])
    assert names == ("src", "dst", "tls-src", "tls-dst", "sasl_ssl-src", "sasl_ssl-dst")
    assert cluster_pair("tls") == ("tls-src", "tls-dst")
    spec = SandboxSpec(clusters=names, security=modes)
    spec.validate()
    assert {name: mode.value for name, mode in spec.security_modes().items()} == modes


def _run(mode: str, records_per_s: float, cpu: float, **extra: Any) -> dict[str, Any]:
    return {"security": mode, "size": 1024, "records_per_s": records_per_s, "cpu_s_per_gb": cpu, **extra}


def test_ratios_compare_each_secured_mode_with_plaintext_of_the_same_run() -> None:
    runs = [
        _run("plaintext", 10_000, 10),
        _run("plaintext", 12_000, 12),
        _run("tls", 8_800, 16.5),
        _run("tls", 1, 1, error="copy incomplete"),  # a failed run counts for nothing
    ]
    (row,) = security_ratios(runs, ["plaintext", "tls"], [1024])
    assert row["plaintext_records_per_s"] == 11_000 and row["records_per_s"] == 8_800
    assert row["records_per_s_ratio"] == 0.8
    assert row["cpu_s_per_gb_ratio"] == 1.5


def test_the_report_has_a_section_with_both_tables() -> None:
    runs = [
        {**_run("plaintext", 10_000, 10), "records": 1000, "mb_per_s": 10.2, "verify": {}, "load": {"min_1m": 1}},
        {**_run("tls", 8_000, 12), "records": 1000, "mb_per_s": 8.2, "verify": {}, "load": {"max_1m": 2}},
    ]
    doc = {
        "scenario": "security",
        "params": {"modes": ["plaintext", "tls"]},
        "runs": runs,
        "ratios": security_ratios(runs, ["plaintext", "tls"], [1024]),
        "load": {"min_1m": 1.0, "max_1m": 2.0, "mean_1m": 1.5},
        "machine": {"cores": 2},
    }
    text = report.render_markdown({"security": doc})
    assert "## Security: one worker over TLS against plaintext" in text
    assert "| 1024 B | default | tls | 8,000 | 10,000 | 0.80 | 1.20 |" in text
    missing = next(line for line in text.splitlines() if line.startswith("No result file yet for"))
    assert "security" not in missing


def test_each_copy_mode_is_compared_with_plaintext_in_the_same_copy_mode() -> None:
    runs = [
        _run("plaintext", 150_000, 3, copy="batch"),
        _run("tls", 50_000, 6, copy="batch"),
        _run("plaintext", 40_000, 20, copy="record"),
        _run("tls", 38_000, 22, copy="record"),
        _run("plaintext", 99, 99),  # the route's default, compared only with its own kind
    ]
    batch, record = security_ratios(runs, ["plaintext", "tls"], [1024], ["batch", "record"])
    assert (batch["copy"], batch["plaintext_records_per_s"], batch["records_per_s_ratio"]) == ("batch", 150_000, 0.333)
    assert (record["copy"], record["records_per_s_ratio"]) == ("record", 0.95)
    (default,) = security_ratios(runs, ["plaintext", "tls"], [1024])
    assert "copy" not in default and default["plaintext_records_per_s"] == 99 and default["records_per_s"] is None
    doc = {
        "scenario": "security",
        "params": {"modes": ["plaintext", "tls"]},
        "runs": [{**r, "records": 10, "mb_per_s": 1.0, "verify": {}} for r in runs[:4]],
        "ratios": [batch, record],
        "load": {},
        "machine": {"cores": 2},
    }
    text = report.render_markdown({"security": doc})
    assert "| 1024 B | batch | tls | 50,000 | 150,000 | 0.33 | 2.00 |" in text
    assert "| 1024 B | record | tls | 38,000 | 40,000 | 0.95 | 1.10 |" in text


def test_each_produce_lanes_setting_is_compared_with_plaintext_at_the_same_setting() -> None:
    runs = [
        {**_run("plaintext", 150_000, 3, copy="batch"), "lanes": 1},
        {**_run("tls", 50_000, 6, copy="batch"), "lanes": 1},
        _run("plaintext", 160_000, 3, copy="batch"),
        _run("tls", 80_000, 5, copy="batch"),
    ]
    one, default = security_ratios(runs, ["plaintext", "tls"], [1024], ["batch"], [1, None])
    assert (one["lanes"], one["records_per_s_ratio"]) == (1, 0.333)
    assert "lanes" not in default and default["records_per_s_ratio"] == 0.5
    doc = {
        "scenario": "security",
        "params": {"modes": ["plaintext", "tls"]},
        "runs": [{**r, "records": 10, "mb_per_s": 1.0, "verify": {}} for r in runs],
        "ratios": [one, default],
        "load": {},
        "machine": {"cores": 2},
    }
    text = report.render_markdown({"security": doc})
    assert "| 1024 B | batch, 1 produce lanes | tls | 50,000 | 150,000 | 0.33 | 2.00 |" in text
    assert "| 1024 B | batch | tls | 80,000 | 160,000 | 0.50 | 1.67 |" in text


def test_produce_lanes_reach_the_workers_environment_and_are_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_lanes("default,1, 4,1") == [None, 1, 4] and parse_lanes("") == [None]
    with pytest.raises(ValueError):
        parse_lanes("0")
    monkeypatch.setenv(LANES_ENV, "3")
    with produce_lanes(1):
        assert os.environ[LANES_ENV] == "1"
    with produce_lanes(None):
        assert LANES_ENV not in os.environ  # Strait's own choice
    assert os.environ[LANES_ENV] == "3"
