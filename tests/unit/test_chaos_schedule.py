"""The chaos benchmark's pure parts: the seeded fault schedule (checked by one invariant checker
over many seeds and shapes), the record-by-record judge of the copy, and the verdict."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import replace

import pytest

from strait.bench.chaos import outcome, report
from strait.bench.chaos.check import CopyCheck
from strait.bench.chaos.outcome import summarize
from strait.bench.chaos.schedule import (
    BROKER_KINDS,
    CATCHUP_LAG_THRESHOLD,
    COORDINATOR_KINDS,
    KINDS,
    STORE_KINDS,
    STORES,
    UNDONE,
    WORKER_KINDS,
    Fault,
    Schedule,
    ScheduleParams,
    generate,
)


def _end(fault: Fault) -> float:
    return fault.end_s if fault.end_s is not None else fault.start_s


def _overlap(a: Fault, b: Fault) -> bool:
    return a.start_s <= _end(b) and b.start_s <= _end(a)


def violations(schedule: Schedule) -> list[str]:
    """Every rule a schedule must keep (see `strait.bench.chaos.schedule`), as readable problems."""
    p = schedule.params
    faults = schedule.faults
    out: list[str] = []
    if [f.id for f in faults] != list(range(len(faults))):
        out.append("ids are not 0..n-1 in start order")
    if [f.start_s for f in faults] != sorted(f.start_s for f in faults):
        out.append("faults are not in start order")
    if p.quiet_tail_s < 20:
        out.append(f"quiet tail of only {p.quiet_tail_s}s")
    for f in faults:
        if f.kind not in p.kinds:
            out.append(f"#{f.id}: kind {f.kind} was not asked for")
        if f.start_s < p.warmup_s:
            out.append(f"#{f.id}: starts at {f.start_s} in the warm-up")
        if _end(f) > p.duration_s - p.quiet_tail_s:
            out.append(f"#{f.id}: {f.kind} ends at {_end(f)}, inside the quiet tail")
        if (f.kind in UNDONE) != (f.end_s is not None) or (f.end_s is not None and f.end_s <= f.start_s):
            out.append(f"#{f.id}: {f.kind} from {f.start_s} to {f.end_s} is not undone properly")
        if f.kind == "worker-pause-short" and f.end_s is not None and f.end_s - f.start_s >= p.session_timeout_s:
            out.append(f"#{f.id}: a short pause of {f.end_s - f.start_s:.1f}s reaches the session timeout")
        if f.kind == "worker-pause-long" and f.end_s is not None and f.end_s - f.start_s <= p.session_timeout_s:
            out.append(f"#{f.id}: a long pause of {f.end_s - f.start_s:.1f}s stays within the session timeout")
        if f.kind not in STORE_KINDS[p.store]:
            out.append(f"#{f.id}: kind {f.kind} on the {p.store} store")
        outage = f.kind in ("zookeeper-kill", "coordinator-pause")
        if outage and f.end_s is not None and f.end_s - f.start_s > p.coordination_max_down_s + 1e-6:
            out.append(f"#{f.id}: {f.kind} for {f.end_s - f.start_s:.1f}s")
        if f.kind in COORDINATOR_KINDS and (p.brokers < 3 or f.target != "coordinator"):
            out.append(f"#{f.id}: {f.kind} on {f.target} of {p.brokers}-broker clusters")
        if f.kind in BROKER_KINDS:
            cluster, _, broker = f.target.partition("/")
            if p.brokers < 3 or not 2 <= int(broker) <= p.brokers:
                out.append(f"#{f.id}: kills broker {f.target} of {p.brokers}-broker clusters")
            if cluster != ("src" if f.kind == "source-broker-kill" else "dst"):
                out.append(f"#{f.id}: {f.kind} on {f.target}")
        if f.kind == "burst" and f.count <= CATCHUP_LAG_THRESHOLD:
            out.append(f"#{f.id}: a burst of {f.count} stays below the catch-up threshold")
    steps = schedule.steps()
    for f in faults:
        mine = [s.action for s in steps if s.fault.id == f.id]
        if mine != (["start", "end"] if f.kind in UNDONE else ["start"]):
            out.append(f"#{f.id}: steps {mine}")
    if [s.at_s for s in steps] != sorted(s.at_s for s in steps):
        out.append("steps are not in time order")
    out += _overlaps(schedule)
    out += _topics(schedule)
    return out


def _overlaps(schedule: Schedule) -> list[str]:
    p = schedule.params
    out = []
    windows = [f for f in schedule.faults if f.end_s is not None]
    for i, a in enumerate(windows):
        for b in windows[i + 1 :]:
            if b.start_s > _end(a):
                break  # in start order: no later fault overlaps `a` either
            if _broker_cluster(a) is not None and _broker_cluster(a) == _broker_cluster(b):
                out.append(f"#{a.id} and #{b.id}: two brokers of {_broker_cluster(a)} down at once")
            if a.kind in WORKER_KINDS and b.kind in WORKER_KINDS and a.target == b.target:
                out.append(f"#{a.id} and #{b.id}: two faults on {a.target} at once")
            if a.kind == b.kind == "controller-kill":
                out.append(f"#{a.id} and #{b.id}: two controller kills at once")
    outages = [f for f in windows if f.kind in ("zookeeper-kill", "coordinator-pause")]
    needs_coordination = {"controller-kill", "topic-readd", "topic-add", "worker-kill"}
    for down in outages:
        for f in schedule.faults:
            if f.kind in needs_coordination and _overlap(down, f):
                out.append(f"#{f.id} {f.kind} needs the store while #{down.id} has it out")
    for down in (f for f in windows if f.kind == "source-broker-kill"):
        for f in schedule.faults:
            if f.kind == "partition-expand" and _overlap(down, f):
                out.append(f"#{f.id} expands a topic while #{down.id} has source broker {down.target} down")
    workers = [f for f in windows if f.kind in WORKER_KINDS]
    for f in workers:
        at_once = sum(1 for o in workers if o.start_s <= f.start_s <= _end(o))
        if at_once >= p.workers:
            out.append(f"#{f.id}: {at_once} of {p.workers} workers faulted at {f.start_s}")
    return out


def _broker_cluster(fault: Fault) -> str | None:
    """The cluster whose broker the fault takes down (the coordinating cluster is the destination)."""
    if fault.kind in BROKER_KINDS:
        return fault.target[:3]
    return "dst" if fault.kind in COORDINATOR_KINDS else None


def _topics(schedule: Schedule) -> list[str]:
    p = schedule.params
    out = []
    partitions = {t: p.partitions for t in p.topics}
    removed: dict[str, tuple[float, float]] = {}
    for f in schedule.faults:
        if f.kind == "topic-readd":
            removed[f.target] = (f.start_s, _end(f))
        if f.kind in ("partition-expand", "burst") and f.target not in partitions:
            out.append(f"#{f.id}: {f.kind} of {f.target}, which is not a base topic")
            continue
        if f.kind == "partition-expand":
            if not partitions[f.target] < f.count <= p.max_partitions:
                out.append(f"#{f.id}: {f.target} from {partitions[f.target]} to {f.count} partitions")
            window = removed.get(f.target)
            if window and window[0] <= f.start_s <= window[1]:
                out.append(f"#{f.id}: {f.target} expanded while removed from the route")
            partitions[f.target] = f.count
        if f.kind == "burst" and (
            len(set(f.partitions)) != len(f.partitions) or not all(0 <= q < partitions[f.target] for q in f.partitions)
        ):
            out.append(f"#{f.id}: burst to partitions {f.partitions} of {partitions[f.target]}")
    if "topic-add" in p.kinds:
        added = sorted(f.target for f in schedule.faults if f.kind == "topic-add")
        if added != sorted(p.late_topics):
            out.append(f"late topics added {added}, wanted {sorted(p.late_topics)} once each")
    return out


def _random_params(seed: int) -> ScheduleParams:
    rng = random.Random(seed)
    store = rng.choice(STORES)
    kinds = frozenset(k for k in STORE_KINDS[store] if rng.random() < 0.9)
    return ScheduleParams(
        duration_s=rng.choice([60.0, 150.0, 180.0, 600.0, 1800.0, rng.uniform(30, 1800)]),
        seed=seed,
        workers=rng.randint(2, 5),
        controllers=rng.randint(1, 3),
        brokers=rng.randint(1, 5),
        topics=tuple(f"t{n}" for n in range(rng.randint(1, 4))),
        late_topics=tuple(f"late{n}" for n in range(rng.randint(0, 2))),
        partitions=rng.randint(1, 6),
        max_partitions=rng.randint(6, 12),
        session_timeout_s=rng.uniform(2, 10),
        mean_gap_s=rng.uniform(3, 20),
        kinds=kinds,
        store=store,
    )


@pytest.mark.parametrize("seed", range(300))
def test_schedules_keep_every_rule_over_many_seeds_and_shapes(seed: int) -> None:
    schedule = generate(_random_params(seed))
    assert violations(schedule) == []


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("seed", range(5))
def test_the_default_30_minute_schedule_keeps_every_rule(seed: int, store: str) -> None:
    schedule = generate(ScheduleParams(duration_s=1800, seed=seed, store=store, kinds=frozenset(STORE_KINDS[store])))
    assert violations(schedule) == []
    assert len(schedule.faults) > 150  # about one fault every 6 s between warm-up and quiet tail


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    params = ScheduleParams(duration_s=600, seed=42)
    assert generate(params) == generate(params)
    assert generate(params).faults != generate(replace(params, seed=43)).faults


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("seed", range(40))
def test_a_three_minute_run_meets_every_kind_of_fault_of_its_store(seed: int, store: str) -> None:
    kinds = frozenset(STORE_KINDS[store])
    schedule = generate(ScheduleParams(duration_s=150, seed=seed, store=store, kinds=kinds))
    assert set(schedule.counts()) == kinds, schedule.counts()


def test_clusters_of_fewer_than_three_brokers_get_no_broker_faults() -> None:
    kafka = frozenset(STORE_KINDS["kafka"])
    for brokers in (1, 2):
        for store, kinds in (("zookeeper", frozenset(KINDS)), ("kafka", kafka)):
            schedule = generate(ScheduleParams(duration_s=1800, seed=7, brokers=brokers, store=store, kinds=kinds))
            assert not (BROKER_KINDS | COORDINATOR_KINDS) & set(schedule.counts())
            assert violations(schedule) == []


def test_only_the_kinds_asked_for_are_scheduled() -> None:
    schedule = generate(ScheduleParams(duration_s=600, seed=3, kinds=frozenset({"worker-kill", "burst"})))
    assert set(schedule.counts()) == {"worker-kill", "burst"}
    assert violations(schedule) == []


def test_a_run_too_short_for_warm_up_and_quiet_tail_has_no_faults() -> None:
    assert generate(ScheduleParams(duration_s=25, seed=1)).faults == ()


# ---- the judge of the copy ---------------------------------------------------------------------

T = "topic"


def _check(acked: dict[int, str], arrivals: dict[int, list[int]]) -> CopyCheck:
    """acked: partition -> "1101" (1 = acknowledged by the source); arrivals: partition -> seqs in offset order."""
    check = CopyCheck({(T, p): bytes(int(c) for c in flags) for p, flags in acked.items()})
    for partition, seqs in arrivals.items():
        for offset, seq in enumerate(seqs):
            check.observe(T, partition, offset, partition, seq)
    return check


def _located(acked: dict[int, str]) -> dict[tuple[str, int], dict[int, tuple[int, int]]]:
    # Source offset = sequence number: the producer wrote each partition in order.
    return {(T, p): {seq: (seq, 1000 + seq) for seq in range(len(flags))} for p, flags in acked.items()}


def test_a_faithful_copy_has_nothing_to_report() -> None:
    acked = {0: "11111", 1: "111"}
    check = _check(acked, {0: [0, 1, 2, 3, 4], 1: [0, 1, 2]})
    for v in check.verdicts(checkpoints={(T, 0): 5, (T, 1): 3}, located=_located(acked)):
        assert (v.checked, v.lost, v.not_yet_copied, v.duplicates, v.out_of_order) == (v.produced, 0, 0, 0, 0)


def test_a_resent_range_counts_duplicates_only_and_two_writers_count_as_interleaved() -> None:
    acked = {0: "1" * 8}
    resent = _check(acked, {0: [0, 1, 2, 3, 1, 2, 3, 4, 5, 6, 7]}).verdicts(checkpoints={}, located={})[0]
    assert (resent.duplicates, resent.resent_ranges, resent.interleaved, resent.out_of_order) == (3, 1, 0, 0)
    assert resent.largest_resends == ((1, 3, 0),)
    mixed = _check(acked, {0: [0, 1, 2, 3, 4, 1, 3, 2, 5, 6, 7]}).verdicts(checkpoints={}, located={})[0]
    assert mixed.interleaved == 2 and mixed.out_of_order == 0
    assert mixed.problems[0] == "interleaved: destination offset 6 repeats 3 after 1"
    swapped = _check(acked, {0: [0, 2, 1, 3, 4, 5, 6, 7]}).verdicts(checkpoints={}, located={})[0]
    assert swapped.out_of_order == 1


def test_missing_records_are_lost_behind_the_checkpoint_and_not_yet_copied_beyond_it() -> None:
    acked = {0: "1" * 10}
    check = _check(acked, {0: [0, 1, 4, 5, 6]})
    assert check.missing() == {(T, 0): [2, 3, 7, 8, 9]}
    verdict = check.verdicts(checkpoints={(T, 0): 7}, located=_located(acked))[0]
    assert (verdict.lost, verdict.not_yet_copied) == (2, 3)
    hole, tail = verdict.runs
    assert (hole.first, hole.last, hole.verdict, hole.next_destination_offset) == (2, 3, "lost", 2)
    assert (tail.first, tail.last, tail.verdict, tail.next_destination_offset) == (7, 9, "not yet copied", None)
    assert tail.sent_us == (1007, 1009)


def test_a_missing_record_the_source_does_not_hold_is_lost_whatever_the_checkpoint() -> None:
    acked = {0: "111"}
    verdict = _check(acked, {0: [0, 1]}).verdicts(checkpoints={(T, 0): None}, located={})[0]
    assert (verdict.lost, verdict.not_yet_copied) == (1, 0)


def test_records_the_source_did_not_acknowledge_are_not_expected() -> None:
    acked = {0: "11011"}  # the produce of record 2 failed
    without = _check(acked, {0: [0, 1, 3, 4]}).verdicts(checkpoints={}, located={})[0]
    assert (without.produced, without.checked, without.lost, without.unacknowledged_copied) == (4, 4, 0, 0)
    withit = _check(acked, {0: [0, 1, 2, 3, 4]}).verdicts(checkpoints={}, located={})[0]
    assert (withit.lost, withit.unacknowledged_copied, withit.out_of_order) == (0, 1, 0)


def test_misrouted_and_foreign_records_are_counted() -> None:
    check = CopyCheck({(T, 0): b"\x01\x01"})
    check.observe(T, 0, 0, 0, 0)
    check.observe(T, 1, 0, 0, 1)  # source partition 0 landed in destination partition 1
    check.observe(T, 0, 1, None, 0)
    verdict = check.verdicts(checkpoints={}, located={})[0]
    assert (verdict.misrouted, verdict.lost, check.foreign) == (1, 0, 1)


# ---- the verdict of a run ----------------------------------------------------------------------


def _summary(arrivals: list[int], *, delivery: str = "at-least-once", acked: str = "1111") -> dict[str, object]:
    schedule = generate(ScheduleParams(duration_s=150, seed=1))
    check = _check({0: acked}, {0: arrivals})
    executed = [
        {
            "fault": 0,
            "kind": "worker-kill",
            "target": "w1",
            "action": "start",
            "planned_s": 10.0,
            "at_s": 10.2,
            "took_s": 0.1,
            "outcome": "ok",
            "detail": "kill -9 w1",
        },
        {
            "fault": 0,
            "kind": "worker-kill",
            "target": "w1",
            "action": "end",
            "planned_s": 14.0,
            "at_s": 14.1,
            "took_s": 0.1,
            "outcome": "ok",
            "detail": "restarted w1",
        },
    ]
    return summarize(
        options={"seed": 1, "duration_s": 150.0, "delivery": delivery, "kinds": frozenset({"burst"})},
        schedule=schedule,
        executed=executed,
        topics={"t0": T},
        shape={
            "brokers": 3,
            "workers": 3,
            "controllers": 2,
            "replication_factor": 3,
            "min_insync_replicas": 2,
            "session_timeout_s": 6.0,
            "hog_processes": 2,
            "partitions": {T: 1},
        },
        load={"produced": acked.count("1"), "failed": 0, "rate_per_partition": 50.0, "record_size": 100},
        load_average={"min": 3.0, "mean": 5.0, "max": 9.0, "cores": 2},
        catch_up={"caught_up": True, "waited_s": 3.0},
        read={"isolation": "read_uncommitted", "seconds": 1.0},
        verdicts=check.verdicts(checkpoints={(T, 0): len(acked)}, located=_located({0: acked})),
        restored=[],
        exits={},
        started_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
        chaos_started_us=0,
        workdir="/tmp/x",
    )


def test_a_run_passes_only_when_every_acknowledged_record_arrived_in_order() -> None:
    assert _summary([0, 1, 2, 3])["ok"]
    assert _summary([0, 1, 2, 3, 2, 3])["ok"]  # duplicates after a failure: at-least-once allows them
    lost = _summary([0, 1, 3])
    assert not lost["ok"] and lost["failures"] == [
        "1 records lost (the checkpoint moved past them, or the source no longer has them)"
    ]
    assert lost["faults_injected"] == {"worker-kill": 1}
    assert not _summary([0, 2, 1, 3])["ok"]
    assert not _summary([0, 1, 2, 3, 3], delivery="exactly-once")["ok"]
    assert not _summary([], acked="")["ok"]  # nothing produced proves nothing


def test_missing_records_are_placed_among_the_faults_around_them() -> None:
    doc = _summary([0, 1, 3])
    run = doc["partitions"][0]["missing_runs"][0]  # type: ignore[index]
    assert run["seq"] == [2, 2] and run["verdict"] == "lost"
    assert run["faults_near"] == ["worker-kill w1 10.2-14.1s"]


def test_resent_ranges_are_charged_to_the_fault_nearest_to_their_end() -> None:
    schedule_steps = [
        {"fault": 0, "kind": "worker-kill", "target": "w1", "action": "start", "at_s": 10.2, "outcome": "ok"},
        {"fault": 0, "kind": "worker-kill", "target": "w1", "action": "end", "at_s": 14.1, "outcome": "ok"},
        {"fault": 1, "kind": "broker-kill", "target": "src-1", "action": "start", "at_s": 30.0, "outcome": "ok"},
    ]
    check = CopyCheck({(T, 0): b"\x01" * 60})
    # Record n was sent at n seconds. Re-sent: 5-12 after the worker kill (back 8 s of traffic),
    # 29-31 after the broker kill, 50-51 far from any fault.
    arrivals = [*range(13), *range(5, 32), *range(29, 52), *range(50, 60)]
    for offset, seq in enumerate(arrivals):
        check.observe(T, 0, offset, 0, seq, sent_us=seq * 1_000_000)
    rows = outcome.resends_by_fault(check.verdicts(checkpoints={}, located={}), schedule_steps, 0)
    assert rows == {
        "broker-kill": {"ranges": 1, "records": 3, "largest_records": 3, "largest_s": 2.0},
        "no fault near": {"ranges": 1, "records": 2, "largest_records": 2, "largest_s": 1.0},
        "worker-kill": {"ranges": 1, "records": 8, "largest_records": 8, "largest_s": 7.0},
    }
    doc = _summary([0, 1, 2, 3, 2, 3])
    # Both records were sent at 0 s, 10 s before the worker kill that sent the copy back.
    assert doc["resends_by_fault"] == {
        "worker-kill": {"ranges": 1, "records": 2, "largest_records": 2, "largest_s": 0.0}
    }
    assert "| worker-kill | 1 | 2 | 2 | 0.00 |" in report.render([doc])


def test_the_reliability_report_shows_each_run_and_its_verdict() -> None:
    passed, failed = _summary([0, 1, 2, 3]), _summary([0, 1, 3])
    failed["seed"] = 2
    text = report.render([passed, failed])
    assert "| at-least-once | 150 s | 1 |" in text and "**pass**" in text
    assert "**FAIL**: 1 records lost" in text and "faults around then: worker-kill w1" in text
    assert report.result_name(passed) == "chaos-at-least-once-150s-seed1.json"
    assert "No chaos result yet" in report.render([])


def test_a_run_is_named_by_the_copy_mode_its_route_resolved_to() -> None:
    run = _summary([0, 1, 2, 3])
    run["shape"]["copy_mode"] = "batch"
    assert report.result_name(run) == "chaos-at-least-once-batch-150s-seed1.json"
    assert "| at-least-once (copy: batch) | 150 s | 1 |" in report.render([run])
    # A run that chose its mode is named by it, and an older run without either by neither.
    run["params"]["copy"] = "record"
    assert report.result_name(run) == "chaos-at-least-once-record-150s-seed1.json"
    older = _summary([0, 1, 2, 3])
    older["shape"].pop("copy_mode", None)
    assert report.result_name(older) == "chaos-at-least-once-150s-seed1.json"
    # Two runs of the same schedule in different copy modes are two experiments.
    assert len(report.latest([run, older])) == 2
