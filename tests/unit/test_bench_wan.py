"""`strait bench wan`: the delayed link's configuration, the sandbox's proxied listener, the
replicators reaching the source through it, ratios and the report. No Toxiproxy runs here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer

from strait.bench import delayed_link, report
from strait.bench.report_wan import wan_summary
from strait.bench.scenarios.harness import Bench
from strait.bench.scenarios.wan import wan_ratios
from strait.cli.bench import _delays
from strait.sandbox import SandboxSpec, kafka
from strait.sandbox.errors import SandboxError
from strait.sandbox.sandbox import BrokerState, ClusterState, Sandbox


def test_a_round_trip_is_split_between_the_two_directions() -> None:
    assert delayed_link.latency_toxics(0) == []
    for rtt in (1, 50, 100, 101):
        toxics = delayed_link.latency_toxics(rtt)
        assert {t["stream"] for t in toxics} == {"upstream", "downstream"}
        assert all(t["type"] == "latency" and t["attributes"]["jitter"] == 0 for t in toxics)
        assert sum(t["attributes"]["latency"] for t in toxics) == rtt
    with pytest.raises(ValueError):
        delayed_link.latency_toxics(-1)


def test_one_proxy_per_broker_from_its_proxy_port_to_its_proxied_listener() -> None:
    assert delayed_link.proxies([(30001, 20001), (30002, 20002)]) == [
        {"name": "broker-1", "listen": "127.0.0.1:30001", "upstream": "127.0.0.1:20001", "enabled": True},
        {"name": "broker-2", "listen": "127.0.0.1:30002", "upstream": "127.0.0.1:20002", "enabled": True},
    ]


def _config(tmp_path: Path, **proxied: int) -> list[str]:
    layout = kafka.BrokerLayout(
        node_id=1,
        port=1000,
        controller_port=1001,
        rack=None,
        log_dirs=(tmp_path / "d",),
        config=tmp_path / "server.properties",
        log=tmp_path / "log",
        cluster_size=1,
        **proxied,  # type: ignore[arg-type]
    )
    return kafka.write_config(layout).read_text().splitlines()


def test_a_proxied_broker_advertises_the_proxy_on_a_second_listener(tmp_path: Path) -> None:
    lines = _config(tmp_path, proxied_port=2000, proxy_port=3000)
    assert "listeners=PLAINTEXT://127.0.0.1:1000,PROXIED://127.0.0.1:2000,CONTROLLER://127.0.0.1:1001" in lines
    # Clients that came in through the proxy are told the proxy's port, never the broker's.
    assert "advertised.listeners=PLAINTEXT://127.0.0.1:1000,PROXIED://127.0.0.1:3000" in lines
    assert "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT" in lines
    # The brokers themselves keep talking over the direct listener.
    assert "inter.broker.listener.name=PLAINTEXT" in lines
    plain = _config(tmp_path)
    assert not any("PROXIED" in line for line in plain)


def test_only_known_plaintext_clusters_can_be_proxied() -> None:
    SandboxSpec(proxied=("src",)).validate()
    with pytest.raises(SandboxError, match="not one of"):
        SandboxSpec(proxied=("far",)).validate()
    with pytest.raises(SandboxError, match="plaintext"):
        SandboxSpec(proxied=("src",), security={"src": "tls"}).validate()


def _broker(n: int, proxy: int | None) -> BrokerState:
    return BrokerState(
        id=n, rack=None, port=1000 + n, controller_port=999, log_dirs=[], config="c", log="l",
        proxied_port=None if proxy is None else 2000 + n, proxy_port=proxy,
    )  # fmt: skip


def test_replicators_reach_the_source_through_the_link_and_the_rest_directly(tmp_path: Path) -> None:
    src = ClusterState(name="src", cluster_id="a", brokers=[_broker(1, 3001), _broker(2, 3002)])
    dst = ClusterState(name="dst", cluster_id="b", brokers=[_broker(1, None)])
    assert src.proxied_bootstrap == "127.0.0.1:3001,127.0.0.1:3002"
    assert dst.proxied_bootstrap is None
    bench = Bench(sandbox=Sandbox(tmp_path, None, {"src": src, "dst": dst}), workdir=tmp_path, store="kafka")
    bench.replicator_source = src.proxied_bootstrap
    strait: Any = bench.replicator("strait", tmp_path / "s", parallelism=1)
    assert strait._config["clusters"]["src"]["bootstrap.servers"] == src.proxied_bootstrap
    assert strait._config["clusters"]["dst"]["bootstrap.servers"] == dst.bootstrap
    mm2: Any = bench.replicator("mm2", tmp_path / "m", parallelism=1, mm2_extra={"x": "1"})
    assert mm2._src == src.proxied_bootstrap and mm2._dst == dst.bootstrap
    # The workload and the verifier still use the source itself.
    assert bench.src["bootstrap.servers"] == src.bootstrap


def test_delays_are_whole_milliseconds() -> None:
    assert _delays("0, 50,100") == [0, 50, 100]
    for bad in ("", "fifty", "-5", "0.5"):
        with pytest.raises(typer.BadParameter):
            _delays(bad)


def _run(system: str, delay: int, rate: float, **extra: Any) -> dict[str, Any]:
    setting = {"copy": extra.pop("copy")} if system == "strait" and "copy" in extra else {}
    if system == "mm2":
        setting = {"mm2_profile": extra.pop("profile", "wan")}
    return {
        "system": system, "delay_ms": delay, "records_per_s": rate, "mb_per_s": rate / 1000, "cpu_s_per_gb": 5,
        "startup_s": 3.0, "size": 1024, "verify": {"missing": 0, "duplicated": 0, "out_of_order": 0},
        **setting, **extra,
    }  # fmt: skip


RUNS = [
    _run("strait", 0, 100_000.0),
    _run("strait", 0, 120_000.0, repeat=1),
    _run("mm2", 0, 50_000.0),
    _run("strait", 100, 99_000.0),
    _run("strait", 100, 1.0, error="copy incomplete"),  # a failed run is left out of the means
    _run("mm2", 100, 10_000.0),
    _run("mm2", 100, 40_000.0, profile="default"),  # another profile: its own rows only
]


def test_ratios_compare_systems_at_each_delay_and_each_with_itself_at_zero() -> None:
    rows = {q["delay_ms"]: q for q in wan_ratios(RUNS, [0, 100], [None], ["wan"])}
    assert rows[0]["strait_records_per_s"] == 110_000
    assert rows[0]["records_per_s"] == 2.2 and rows[0]["strait_kept"] == 1.0
    assert rows[100]["strait_records_per_s"] == 99_000
    assert rows[100]["records_per_s"] == 9.9
    assert rows[100]["strait_kept"] == 0.9 and rows[100]["mm2_kept"] == 0.2
    # Without a 0 ms run there is nothing to keep.
    (only,) = wan_ratios(RUNS, [100], [None], ["default"])
    assert only["mm2_records_per_s"] == 40_000 and only["mm2_kept"] is None


def test_the_report_has_a_wan_section_and_summary_line() -> None:
    doc = {
        "scenario": "wan",
        "params": {"records": 1000, "size": 1024, "compression": "none", "partitions": 8, "parallelism": 1,
                   "link": {"tool": delayed_link.TOOL}},
        "runs": RUNS,
        "ratios": wan_ratios(RUNS, [0, 100], [None], ["wan"]),
    }  # fmt: skip
    text = report.render_markdown({"wan": doc})
    assert "## Across a WAN: the source cluster D ms away" in text
    assert "| 100 | default | wan | 99,000 | 10,000 | 9.90 | 0.90 | 0.20 |" in text
    assert "failed: copy incomplete" in text
    # The settings the `wan` profile adds to `tuned` are named from the profile itself.
    assert "`tuned` settings plus `src.consumer.receive.buffer.bytes=8388608`" in text
    (line,) = wan_summary(doc)
    assert "100 ms round trip" in line and "9.90" in line
    assert wan_summary(None) == [] and "wan" in report.SCENARIOS
