"""Tiers: disk class rules, and hot replicas on SSD dirs over many generated clusters (only
intra-broker moves, rack and capacity rules kept, the SSD dirs holding exactly the hottest
replicas that fit their budget)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from strait.balancer import operations
from strait.balancer.goals import Goals, by_class, eligible_dirs, spread
from strait.balancer.imbalance import assess
from strait.balancer.invariants import tier_violations, violations
from strait.balancer.model import Broker, ClusterModel, LogDir, Partition
from strait.balancer.plan import IntraBrokerMove, apply
from strait.balancer.synthetic import Shape, generate
from strait.balancer.synthetic import traffic as synthetic_traffic
from strait.balancer.tiers import DiskClasses
from strait.balancer.traffic import Rate, Traffic
from strait.cli.balance import app
from strait.cli.balance_args import CliError, parse_disk_classes, target, traffic_window
from strait.config import ConfigError, parse_config

GOALS = Goals(threshold=0.10, capacity_limit=0.90)
CLASSES = DiskClasses.of({"/data/d0": "ssd", "/data/d*": "hdd"})


def test_most_specific_rule_wins_and_layers_stack() -> None:
    file = DiskClasses.of({"*": "hdd", "/data/ssd*": "ssd", "3": "hdd", "4:/data/ssd1": "hdd"})
    assert file.class_of(1, "/data/ssd0") == "ssd"
    assert file.class_of(1, "/data/x") == "hdd"
    assert file.class_of(3, "/data/ssd0") == "hdd"  # a broker rule beats a glob
    assert file.class_of(4, "/data/ssd1") == "hdd"
    flags = DiskClasses.of({"/data/x": "ssd"})
    both = flags.over(file)
    assert both.class_of(1, "/data/x") == "ssd"  # the upper layer decides where it matches
    assert both.class_of(1, "/data/ssd0") == "ssd" and both.class_of(2, "/data/y") == "hdd"
    assert DiskClasses.of({"/a": "ssd"}).class_of(1, "/b") is None


@pytest.mark.parametrize(
    ("rules", "message"), [({"/a": "nvme"}, "must be one of ssd, hdd"), ({"data": "ssd"}, "expected '\\*'")]
)
def test_bad_rules_are_refused_by_name(rules: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DiskClasses.of(rules)


def _one_broker(sizes: dict[str, int], on: dict[str, str], ssd_cap: int = 100, hdd_cap: int = 1000) -> ClusterModel:
    used = {"/ssd": 0, "/hdd": 0}
    parts = []
    for t, size in sizes.items():
        used[on[t]] += size
        parts.append(Partition(t, 0, (1,), (on[t],), size, 1))
    dirs = [LogDir(1, "/ssd", ssd_cap, used["/ssd"]), LogDir(1, "/hdd", hdd_cap, used["/hdd"])]
    return ClusterModel.build([Broker(1)], dirs, parts)


def test_hottest_that_fit_go_to_ssd_cold_ones_leave() -> None:
    # SSD budget 90 bytes: a (hot, 40) and c (warm, 40) fit; b (hotter but 60) does not fit after a;
    # cold d sits on SSD and must leave.
    model = _one_broker({"a": 40, "b": 60, "c": 40, "d": 30}, {"a": "/hdd", "b": "/hdd", "c": "/hdd", "d": "/ssd"})
    t = Traffic({("b", 0): Rate(900.0), ("a", 0): Rate(1000.0), ("c", 0): Rate(10.0, 0, 5.0)})
    classes = DiskClasses.of({"/ssd": "ssd", "/hdd": "hdd"})
    plan = operations.tiers(model, t, classes, GOALS)
    assert all(isinstance(m, IntraBrokerMove) for m in plan.moves)
    after = apply(model, plan.moves)
    where = {p.topic: p.dirs[0] for p in after.partitions.values()}
    assert where == {"a": "/ssd", "b": "/hdd", "c": "/ssd", "d": "/hdd"}
    assert tier_violations(model, plan, GOALS, t, classes) == []
    assert violations(model, plan, GOALS) == []


def test_full_hdd_keeps_the_cold_replica_on_ssd_and_says_so() -> None:
    model = _one_broker({"cold": 50, "hot": 60}, {"cold": "/ssd", "hot": "/hdd"}, ssd_cap=100, hdd_cap=100)
    t = Traffic({("hot", 0): Rate(1000.0)})
    plan = operations.tiers(model, t, DiskClasses.of({"/ssd": "ssd", "/hdd": "hdd"}), GOALS)
    assert violations(model, plan, GOALS) == []
    after = apply(model, plan.moves)
    assert after.partitions[("cold", 0)].dirs == ("/ssd",)
    assert any("tiers:" in w and "cold-0" in w for w in plan.warnings)
    assert any("tiers:" in w and "hot-0" in w for w in plan.warnings)


SHAPES = {
    "two-dirs-racks": Shape(brokers=6, dirs_per_broker=2, partitions=300, racks=3, skew=0.3, fill=0.3),
    "three-dirs": Shape(brokers=5, dirs_per_broker=3, partitions=400, racks=0, skew=0.5, fill=0.4),
    "tight": Shape(brokers=4, dirs_per_broker=2, partitions=60, replication=2, racks=2, skew=0.5, fill=0.7),
}


@pytest.mark.parametrize("shape_name", sorted(SHAPES))
@pytest.mark.parametrize("seed", range(8))
def test_tiers_over_generated_clusters(shape_name: str, seed: int) -> None:
    model = generate(SHAPES[shape_name], seed)
    t = synthetic_traffic(model, seed, active=0.2)
    plan = operations.tiers(model, t, CLASSES, GOALS)
    assert violations(model, plan, GOALS) == []
    assert all(isinstance(m, IntraBrokerMove) for m in plan.moves)
    assert tier_violations(model, plan, GOALS, t, CLASSES) == []
    # After the full rebalance too: tiers come last and keep every rule.
    full = operations.rebalance(model, GOALS, traffic=t, classes=CLASSES)
    assert violations(model, full, GOALS) == []
    assert tier_violations(model, full, GOALS, t, CLASSES) == []


def test_hot_replicas_end_on_ssd_when_there_is_room() -> None:
    model = generate(SHAPES["two-dirs-racks"], 1)
    t = synthetic_traffic(model, 1, active=0.05)
    plan = operations.rebalance(model, GOALS, traffic=t, classes=CLASSES)
    assert not [w for w in plan.warnings if w.startswith("tiers:")]
    after = apply(model, plan.moves)
    for key in t.rates:
        p = after.partitions[key]
        assert set(p.dirs) == {"/data/d0"}, p


# ---- configuration file and command line ---------------------------------------------------------


def _config(tmp_path: Path, balance: str) -> Path:
    path = tmp_path / "strait.yaml"
    path.write_text(
        "clusters:\n  big: {bootstrap.servers: '127.0.0.1:1'}\n"
        "routes: [{name: r, source: big, destination: big}]\n" + balance
    )
    return path


def test_disk_classes_from_the_file_with_flags_over_them(tmp_path: Path) -> None:
    path = _config(tmp_path, "balance:\n  disk_classes:\n    big:\n      '/data/ssd*': SSD\n      '*': hdd\n")
    where = target(None, "big", path, None, ["/data/ssd1=hdd", "2:/x=ssd"])
    assert where.classes.class_of(1, "/data/ssd0") == "ssd"
    assert where.classes.class_of(1, "/data/ssd1") == "hdd"
    assert where.classes.class_of(2, "/x") == "ssd" and where.classes.class_of(1, "/x") == "hdd"
    assert not target("h:9", None, None).classes


@pytest.mark.parametrize(
    ("balance", "needle"),
    [
        ({"disk_classes": {"big": {"/d": "tape"}}}, "must be one of ssd, hdd"),
        ({"disk_classes": {"big": {"d": "ssd"}}}, "'d'"),
        ({"disk_classes": {"nope": {"/d": "ssd"}}}, "nope"),
    ],
)
def test_bad_disk_classes_in_the_file_are_refused_at_load(balance: dict[str, object], needle: str) -> None:
    base = {
        "clusters": {"big": {"bootstrap.servers": "x:1"}},
        "routes": [{"name": "r", "source": "big", "destination": "big"}],
    }
    with pytest.raises(ConfigError, match="balance") as info:
        parse_config({**base, "balance": balance}, {})
    assert needle in str(info.value)


def test_bad_flags_are_refused_before_connecting() -> None:
    with pytest.raises(CliError, match="DIR_GLOB=ssd"):
        parse_disk_classes(["ssd"])
    with pytest.raises(CliError, match="must be one of"):
        parse_disk_classes(["/d=flash"])
    assert parse_disk_classes(["/d=SSD"]) == {"/d": "ssd"}
    assert traffic_window(None, DiskClasses()) == 0.0
    assert traffic_window(None, DiskClasses.of({"/d": "ssd"})) == 10.0
    assert traffic_window(3.5, DiskClasses()) == 3.5
    with pytest.raises(CliError, match="--traffic-window"):
        traffic_window(-1, DiskClasses())
    result = CliRunner().invoke(app, ["tiers", "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 2 and "no disk classes" in result.stderr


# ---- the disk spread within each tier ------------------------------------------------------------


def _tier_spreads(model: ClusterModel, classes: DiskClasses) -> dict[str | None, float]:
    return {tier: spread(dirs) for tier, dirs in by_class(eligible_dirs(model), classes.class_of).items()}


@pytest.mark.parametrize("shape_name", sorted(SHAPES))
@pytest.mark.parametrize("seed", range(6))
def test_a_tiered_rebalance_evens_out_each_tier_and_reports_that_spread(shape_name: str, seed: int) -> None:
    """With dirs classed, SSDs hold only hot replicas on purpose, so the spread that counts (in the
    plan's stats, and for the watch) is the one within each tier; the plan never widens it, and it
    ends within the threshold unless a warning says why."""
    model = generate(SHAPES[shape_name], seed)
    t = synthetic_traffic(model, seed, active=0.2)
    plan = operations.rebalance(model, GOALS, traffic=t, classes=CLASSES)
    assert violations(model, plan, GOALS) == []
    assert tier_violations(model, plan, GOALS, t, CLASSES) == []
    before, after = _tier_spreads(model, CLASSES), _tier_spreads(apply(model, plan.moves), CLASSES)
    stats = plan.stats
    assert stats["spread_before"] == pytest.approx(max(before.values()), abs=1e-6)
    assert stats["spread_after"] == pytest.approx(max(after.values()), abs=1e-6)
    assert stats["spread_by_class"] == {
        str(k): [pytest.approx(before[k], abs=1e-6), pytest.approx(after[k], abs=1e-6)] for k in after
    }
    spread_warned = any("disk spread" in w for w in plan.warnings)
    for tier, now in after.items():
        assert now <= max(before[tier], GOALS.threshold) + 1e-9 or spread_warned, (tier, before, after)
        assert now <= GOALS.threshold + 1e-9 or spread_warned, (tier, now, plan.warnings)
    # The watch measures the same spread: a cluster the plan left even raises no disk_spread.
    if not spread_warned:
        assert "disk_spread" not in assess(apply(model, plan.moves), GOALS, CLASSES).reasons


def test_an_empty_ssd_beside_full_hdds_is_no_skew_for_a_tiered_watch() -> None:
    """Two brokers, SSD empty (nothing is hot), HDDs even at 60%: over all disks the spread is
    0.6, within each tier 0; the watch with classes finds nothing to do, without them it would
    keep proposing to fill the SSDs with cold data (and the tiers to empty them again)."""
    dirs = [
        LogDir(b, path, 1000, 600 if path == "/data/d1" else 0) for b in (1, 2) for path in ("/data/d0", "/data/d1")
    ]
    parts = [Partition(f"t{b}", 0, (b,), ("/data/d1",), 600, 1) for b in (1, 2)]
    model = ClusterModel.build([Broker(1), Broker(2)], dirs, parts)
    assert "disk_spread" in assess(model, GOALS).reasons
    tiered = assess(model, GOALS, CLASSES)
    assert "disk_spread" not in tiered.reasons and tiered.spread == pytest.approx(0.0)
    plan = operations.rebalance(model, GOALS, traffic=Traffic({}), classes=CLASSES)
    assert plan.moves == () and plan.stats["spread_after"] == pytest.approx(0.0)
