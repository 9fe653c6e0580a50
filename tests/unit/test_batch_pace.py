"""The batch pipeline's latency-guarded pace: its decisions over generated windows, the worker's
``batch_sharing`` settings, and :class:`Sharing` reading a realtime latency histogram."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strait.config import BatchSharingConfig, ConfigError, load_config
from strait.metrics.histogram import BucketCounts, Buckets
from strait.worker.batch.budget import Sharing, pace_settings
from strait.worker.batch.pace import LatencyPace, PaceSettings, Window

MB = 1_000_000
SETTINGS = PaceSettings(floor=2 * MB, ceiling=64 * MB, start=8 * MB)

windows = st.builds(
    Window,
    p99_s=st.none() | st.floats(min_value=0, max_value=5, allow_nan=False),
    samples=st.integers(min_value=0, max_value=2000),
    batch_bytes=st.integers(min_value=0, max_value=100 * MB),
    arriving=st.booleans(),
    leaving=st.booleans(),
)
pace_settings_strategy = st.builds(
    lambda floor, span, start, budget, ratio: PaceSettings(
        floor=floor, ceiling=floor * span, start=start, budget_s=budget, budget_ratio=ratio
    ),
    floor=st.floats(min_value=1e5, max_value=1e8),
    span=st.floats(min_value=1, max_value=1000),
    start=st.floats(min_value=0, max_value=1e10),
    budget=st.none() | st.floats(min_value=1e-3, max_value=1),
    ratio=st.floats(min_value=1.01, max_value=10),
)


@settings(max_examples=300, deadline=None)
@given(pace_settings_strategy, st.lists(st.tuples(windows, st.booleans()), max_size=60))
def test_every_decision_keeps_the_invariants(s: PaceSettings, history: list[tuple[Window, bool]]) -> None:
    pace = LatencyPace(s)
    assert s.floor <= pace.rate <= s.ceiling
    undo: tuple[float, float | None] | None = None  # the rate and cut_from before a cut, one window long
    for window, paced in history:
        before, budget, cut_from, baseline = pace.rate, pace.budget(), pace.cut_from, pace.baseline_s
        probes = pace.probes
        rate = pace.step(window, paced=paced)
        assert s.floor <= rate <= s.ceiling
        if window.arriving or window.leaving:
            # A backlog's last records may be among the realtime ones: never a cut, nor a baseline.
            assert rate >= before and (pace.baseline_s == baseline or not window.arriving)
        judged = window.p99_s is not None and window.samples >= s.min_samples
        taken_back, undo = undo, (before, cut_from) if pace.last == "cut" else None
        if not judged or window.batch_bytes < s.quiet_bytes or not paced:
            assert rate == before  # nothing to judge, a quiet window, or not sharing: the rate holds
            continue
        if window.leaving and taken_back is not None:
            # The window cut just before held a backlog's records after all: the cut is undone.
            assert (rate, pace.cut_from) == taken_back
            continue
        assert window.p99_s is not None
        if window.p99_s > budget:
            assert rate <= before  # never grows while over budget
            if window.arriving or window.leaving:
                assert rate == before
            else:
                # In proportion to the overshoot, within [cut, mild_cut]; remembered for the recovery.
                assert max(s.floor, before * s.cut) <= rate <= max(s.floor, before * s.mild_cut)
                assert pace.cut_from == before
                if window.p99_s >= budget / s.cut:
                    assert rate == max(s.floor, before * s.cut)
        else:
            assert rate >= before  # never cut within budget
            if cut_from is None:
                assert rate == min(s.ceiling, before * s.grow)  # multiplicative until the first cut
            elif before < cut_from * s.recover:
                # back towards the rate that went over, multiplicatively, but not to it
                assert rate == min(s.ceiling, cut_from * s.recover, before * s.grow)
            else:
                # additive near the knee: a step doubling with each window in a row, never
                # faster than the multiplicative growth (yet at least one step)
                step = max(s.step, min(s.step * s.probe_growth**probes, before * (s.grow - 1)))
                assert rate == min(s.ceiling, before + step)
                assert pace.probes == probes + 1
        assert pace.budget() >= (s.budget_s if s.budget_s is not None else s.min_budget_s)
        assert s.budget_s is not None or pace.budget() <= max(s.max_budget_s, s.default_budget_s)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=1e-4, max_value=2), min_size=1, max_size=30))
def test_the_budget_is_the_ratio_of_the_quiet_baseline(quiet_p99s: list[float]) -> None:
    pace = LatencyPace(SETTINGS)
    assert pace.budget() == SETTINGS.default_budget_s  # nothing learned yet
    for p99 in quiet_p99s:
        pace.step(Window(p99, 100, 0), paced=True)
        assert pace.rate == SETTINGS.start
    assert pace.baseline_s is not None
    assert min(quiet_p99s) - 1e-12 <= pace.baseline_s <= max(quiet_p99s) + 1e-12
    learned = max(SETTINGS.min_budget_s, SETTINGS.budget_ratio * pace.baseline_s)
    assert pace.budget() == min(SETTINGS.max_budget_s, learned)  # a stale baseline cannot lift it far
    fixed = LatencyPace(PaceSettings(floor=MB, ceiling=2 * MB, start=MB, budget_s=0.03))
    for p99 in quiet_p99s:
        fixed.step(Window(p99, 100, 0), paced=True)
    assert fixed.budget() == 0.03  # an absolute budget is not learned


def machine(knee: float, base_s: float) -> Callable[[float], float]:
    """A worker whose realtime p99 grows with the batch rate, steeply past ``knee`` bytes/s."""
    return lambda rate: base_s * (1 + (rate / knee) ** 2)


@pytest.mark.parametrize("knee_mb", [1, 8, 20, 200])
def test_over_time_the_pace_settles_near_the_fastest_rate_within_budget(knee_mb: float) -> None:
    base_s, budget_s = 0.015, 0.03
    latency = machine(knee_mb * MB, base_s)
    within = knee_mb * MB  # latency(rate) <= budget exactly up to the knee
    pace = LatencyPace(PaceSettings(floor=2 * MB, ceiling=64 * MB, start=8 * MB, budget_s=budget_s))
    rates = []
    for _ in range(200):
        rates.append(pace.step(Window(latency(pace.rate), 500, int(pace.rate)), paced=True))
    late = rates[100:]
    if within < 2 * MB:
        assert set(late) == {2 * MB}  # out of reach: the floor, so the backlog still drains
    elif within >= 64 * MB:
        assert set(late) == {64 * MB}  # never over budget: the ceiling
    else:
        # It probes just past the knee, cuts, and grows back: never below half the knee's rate
        # (beyond the first cuts), and over budget in only a minority of windows.
        assert min(late) >= within * SETTINGS.cut / SETTINGS.grow
        assert max(late) <= within * SETTINGS.grow
        over = sum(latency(r) > budget_s for r in late)
        assert over <= len(late) / 2


def test_a_window_just_over_budget_cuts_mildly_and_the_rate_returns_at_once() -> None:
    pace = LatencyPace(PaceSettings(floor=2 * MB, ceiling=64 * MB, start=20 * MB, budget_s=0.020))
    assert pace.step(Window(0.021, 1000, 20 * MB), paced=True) == 16 * MB  # 5 % over: 0.8x, not 0.5x
    assert pace.step(Window(0.010, 1000, 16 * MB), paced=True) == 18 * MB  # back to 0.9x the rate cut
    assert pace.step(Window(0.010, 1000, 18 * MB), paced=True) == 19 * MB  # then one step a window
    assert pace.step(Window(0.200, 1000, 19 * MB), paced=True) == 9.5 * MB  # 10x over: halved


def test_settings_refuse_a_floor_above_the_ceiling() -> None:
    with pytest.raises(ValueError, match="floor"):
        PaceSettings(floor=2, ceiling=1, start=1)
    with pytest.raises(ValueError, match="floor_mb_s"):
        BatchSharingConfig(floor_mb_s=10, ceiling_mb_s=5)


def test_the_worker_file_and_environment_set_the_pace(tmp_path: Path) -> None:
    path = tmp_path / "strait.yaml"
    path.write_text(
        """
clusters: {src: {bootstrap.servers: "127.0.0.1:9092"}, dst: {bootstrap.servers: "127.0.0.1:9093"}}
routes: [{name: r, source: src, destination: dst, include: [".*"]}]
worker: {batch_sharing: {latency_budget_ms: 40, floor_mb_s: 1}}
"""
    )
    config = load_config(path, environ={}).worker.batch_sharing
    assert (config.pace, config.latency_budget_ms, config.floor_mb_s, config.ceiling_mb_s) == ("latency", 40, 1, 64)
    s = pace_settings(config)
    assert (s.budget_s, s.floor, s.ceiling) == (0.04, 1 * MB, 64 * MB)
    config = load_config(path, environ={"STRAIT_WORKER__BATCH_SHARING__PACE": "fixed"}).worker.batch_sharing
    assert config.pace == "fixed"
    config = load_config(path, environ={"STRAIT_WORKER__BATCH_SHARING__ENABLED": "false"}).worker.batch_sharing
    assert config.enabled is False
    with pytest.raises(ConfigError, match="batch_sharing"):
        load_config(path, environ={"STRAIT_WORKER__BATCH_SHARING__PACE": "fast"})
    with pytest.raises(ConfigError, match="latency_budget_ms"):
        load_config(path, environ={"STRAIT_WORKER__BATCH_SHARING__LATENCY_BUDGET_MS": "0"})


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


class Realtime:
    """The realtime pipeline's end-to-end histogram, as the observer keeps it (cumulative)."""

    def __init__(self) -> None:
        self.buckets: Buckets | None = None

    def observe(self, seconds: float, count: int) -> None:
        if self.buckets is None:
            self.buckets = Buckets()
        self.buckets.observe(seconds, count)

    def __call__(self) -> BucketCounts | None:
        return None if self.buckets is None else self.buckets.snapshot()


class Fetched:
    """The backlog pipeline's fetched bytes so far, as its reports carry them."""

    def __init__(self) -> None:
        self.total = 0

    def __call__(self) -> int:
        return self.total


def test_sharing_paces_by_each_windows_realtime_latency() -> None:
    clock, realtime, fetched = Clock(), Realtime(), Fetched()
    config = BatchSharingConfig(start_mb_s=8, floor_mb_s=2, ceiling_mb_s=16, latency_budget_ms=30)
    sharing = Sharing(config, clock=clock, latency=realtime, fetched=fetched)
    realtime.observe(0.010, 1000)
    sharing.share(True)  # the first window (before sharing): quiet, the baseline
    assert sharing.pace is not None and sharing.pace.baseline_s is not None
    assert sharing.rate == 8 * MB

    def window(latency_s: float, size: int) -> int:
        realtime.observe(latency_s, 1000)
        fetched.total += size
        clock.now += 1.0
        sharing.share(True)
        return round(sharing.pace.rate / MB) if sharing.pace else 0

    assert window(0.010, 8 * MB) == 10  # within budget: grows
    assert window(0.012, 8 * MB) == 12
    assert window(0.200, 8 * MB) == 6  # far over: halved (only this window's records count)
    assert window(0.010, 0) == 6  # the batch pipeline fetched nothing: a quiet window, held
    assert window(0.020, 8 * MB) == 8  # after a cut, back towards 0.9x the rate cut, by 1.25x
    assert sharing.pace is not None and sharing.pace.rate == 6.25 * 1.25 * MB
    realtime.observe(30.0, 200)  # a caught-up backlog's last records, copied by the realtime pipeline
    fetched.total += 8 * MB
    clock.now += 1.0
    sharing.share(True, arriving=frozenset({"caught-up"}))
    assert sharing.pace.rate == 6.25 * 1.25 * MB  # held, not cut
    assert sharing.rate == 6.25 * 1.25 * MB
    for _ in range(10):
        window(0.010, 8 * MB)
    assert sharing.pace.rate == 16 * MB  # the ceiling
    for _ in range(10):
        window(0.500, 8 * MB)
    assert sharing.pace.rate == 2 * MB  # the floor: the backlog still drains


def test_a_window_with_a_backlog_s_last_records_is_judged_by_the_other_topics_records() -> None:
    clock, fetched = Clock(), Fetched()
    topics = {"live": Buckets(), "caught-up": Buckets()}

    def all_topics() -> BucketCounts:
        snaps = [b.snapshot() for b in topics.values()]
        return snaps[0].plus(snaps[1])

    config = BatchSharingConfig(start_mb_s=8, floor_mb_s=2, ceiling_mb_s=16, latency_budget_ms=30)
    sharing = Sharing(
        config,
        clock=clock,
        latency=all_topics,
        latency_by_topic=lambda: {t: b.snapshot() for t, b in topics.items()},
        fetched=fetched,
    )
    topics["live"].observe(0.010, 1000)
    sharing.share(True)
    assert sharing.pace is not None

    def window(live_s: float, old_s: float | None, arriving: frozenset[str]) -> float:
        topics["live"].observe(live_s, 1000)
        if old_s is not None:
            topics["caught-up"].observe(old_s, 300)
        fetched.total += 8 * MB
        clock.now += 1.0
        sharing.share(True, arriving=arriving)
        assert sharing.pace is not None
        return sharing.pace.rate / MB

    old = frozenset({"caught-up"})
    # The backlog's last records are 30 s old, the live topic's within budget: it grows.
    assert window(0.010, 30.0, old) == 10
    # The live topic's own records over budget while the other finishes: cut, not held.
    assert window(0.450, 30.0, old) == 5
    # Every realtime topic is finishing a backlog: nothing else to judge by, the pace holds.
    assert window(0.010, 30.0, frozenset({"caught-up", "live"})) == 5
    # Once no topic arrives, every topic counts again (the old one's records are live now).
    assert window(0.010, 0.010, frozenset()) == 6.25  # back towards 0.9x the rate cut, by 1.25x


def test_a_window_in_which_a_realtime_partition_fell_behind_holds_the_pace() -> None:
    clock, realtime, fetched = Clock(), Realtime(), Fetched()
    config = BatchSharingConfig(start_mb_s=8, floor_mb_s=2, ceiling_mb_s=16, latency_budget_ms=30)
    sharing = Sharing(config, clock=clock, latency=realtime, fetched=fetched)
    realtime.observe(0.010, 1000)
    sharing.share(True)

    def window(latency_s: float, *, leaving: bool) -> float:
        realtime.observe(latency_s, 1000)
        fetched.total += 8 * MB
        clock.now += 1.0
        sharing.share(True, leaving=leaving)
        assert sharing.pace is not None
        return sharing.pace.rate / MB

    # Realtime records queued behind a backlog the realtime pipeline copied: held, not cut.
    assert window(0.200, leaving=True) == 8
    assert window(0.010, leaving=True) == 10  # within budget: grows as usual
    assert window(0.200, leaving=False) == 5  # the same tail with no partition leaving: cut


def test_idle_realtime_partitions_leave_the_backlog_unpaced_until_their_records_flow_again() -> None:
    clock, realtime, fetched = Clock(), Realtime(), Fetched()
    config = BatchSharingConfig(start_mb_s=8, floor_mb_s=2, ceiling_mb_s=16, latency_budget_ms=30)
    sharing = Sharing(config, clock=clock, latency=realtime, fetched=fetched)

    def window(*, settled: bool, latency_s: float | None = None) -> None:
        if latency_s is not None:
            realtime.observe(latency_s, 1000)
        fetched.total += 8 * MB
        clock.now += 1.0
        sharing.share(True, settled=settled)

    realtime.observe(0.010, 1000)
    sharing.share(True)
    assert not sharing.idle and sharing.rate == 8 * MB
    window(settled=False)  # no acknowledgement, but records in flight: a stall, still paced
    assert not sharing.idle and sharing.rate is not None
    window(settled=True)  # no realtime record, all of them acknowledged: caught up and idle
    assert sharing.idle
    assert sharing.rate is None  # nothing to protect: unpaced
    assert sharing.pace is not None and sharing.pace.rate == 8 * MB  # the pace itself held
    window(settled=False, latency_s=0.200)  # realtime records again, late ones
    assert not sharing.idle
    assert sharing.pace.rate == 8 * MB  # that window ran unpaced: it says nothing of the pace
    assert sharing.rate == 8 * MB  # paced again
    window(settled=False, latency_s=0.200)
    assert sharing.pace.rate == 4 * MB  # late while paced: cut


def test_without_a_latency_to_read_a_latency_pace_is_the_fixed_rate() -> None:
    sharing = Sharing(BatchSharingConfig(fixed_mb_s=4), clock=Clock())
    sharing.share(True)
    assert sharing.pace is None
    assert sharing.rate == 4 * MB


def test_a_backlog_process_paces_by_its_routes_realtime_pipelines_only() -> None:
    from strait.metrics.stages import RouteObserver
    from strait.worker.batch.remote import BacklogProcess

    observer = RouteObserver("r", clock=lambda: 100.0)
    pipeline = BacklogProcess(
        name="batch",
        source={},
        destination={},
        group_id="g",
        client_id="c",
        observer=observer,
        sharing=BatchSharingConfig(latency_budget_ms=30),
    )
    try:
        sharing = pipeline._sharing
        assert sharing.pace is not None and sharing.pace.settings.budget_s == 0.03
        probe = sharing._latency
        assert probe is not None and probe() is None  # nothing copied yet
        observer.acked("realtime", "t", 0, 0.001, 99_992, count=50)  # 8 ms from source to ack
        observer.acked("batch", "t", 1, 0.001, 90_000, count=1000)  # the backlog's own records: not counted
        counts = probe()
        assert counts is not None and counts.count == 50
        p99 = counts.quantile(0.99)
        assert p99 is not None and 0.005 < p99 <= 0.01  # the histogram's bucket of 8 ms
    finally:
        pipeline.stop(0)


def test_a_cut_is_taken_back_when_the_next_window_shows_a_backlog_arriving() -> None:
    pace = LatencyPace(PaceSettings(floor=MB, ceiling=64 * MB, start=32 * MB, budget_s=0.01))
    pace.step(Window(0.1, 500, 8 * MB), paced=True)
    assert pace.last == "cut" and pace.rate == 16 * MB
    # The next window finds a partition behind by a backlog: the tail of the window before was its.
    assert pace.step(Window(0.1, 500, 8 * MB, arriving=True, leaving=True), paced=True) == 32 * MB
    assert pace.cut_from is None
    # Only the window right after a cut takes it back.
    pace.step(Window(0.1, 500, 8 * MB), paced=True)
    pace.step(Window(0.005, 500, 8 * MB), paced=True)
    cut_to = pace.rate
    assert pace.step(Window(0.005, 500, 8 * MB, arriving=True, leaving=True), paced=True) >= cut_to
    assert pace.rate < 32 * MB
    # A backlog finishing in the realtime pipeline (arriving, not leaving) does not undo a cut.
    pace.step(Window(0.1, 500, 8 * MB), paced=True)
    cut_to = pace.rate
    assert pace.step(Window(0.1, 500, 8 * MB, arriving=True), paced=True) == cut_to


def test_steps_past_the_recovery_double_while_the_budget_holds_and_start_again_after_a_cut() -> None:
    pace = LatencyPace(PaceSettings(floor=MB, ceiling=200 * MB, start=10 * MB, budget_s=0.01, step=MB))
    pace.step(Window(0.1, 500, 8 * MB), paced=True)  # cut to 5 MB/s from 10
    rates = [pace.step(Window(0.005, 500, 8 * MB), paced=True) / MB for _ in range(7)]
    # 1.25x back to 0.9x the rate it cut, then steps of 1, 2, 4 MB/s... capped by 1.25x a window.
    assert rates[:3] == [6.25, 7.8125, 9.0]
    assert rates[3:] == [10.0, 12.0, 15.0, 18.75]
    pace.step(Window(0.1, 500, 8 * MB), paced=True)
    assert pace.probes == 0
