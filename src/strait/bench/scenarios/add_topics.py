"""Adding topics under load: the longest gap on a busy topic and each new topic's first record."""

from __future__ import annotations

import os
import statistics
import time
import uuid
from typing import Any

from strait.bench import workload
from strait.bench.markdown import missing_words
from strait.bench.scenarios.harness import (
    SEC,
    Bench,
    live,
    rate_series,
    ratio,
    run_safely,
    topic_name,
    verdict,
)
from strait.bench.stats import first_at_or_after, longest_gap


def add_topics(
    bench: Bench,
    *,
    rate: float = 2000,
    partitions: int = 8,
    new_topics: int = 10,
    new_partitions: int = 2,
    new_rate: float = 200,
    before_s: float = 10.0,
    after_s: float = 30.0,
    size: int = 100,
    parallelism: int = 1,
    mm2_refresh_topics_s: int = 5,
    copy: str | None = None,
) -> dict[str, Any]:
    """Traffic on topic A; ten topics appear; A's longest arrival gap and each new topic's first record.

    ``copy`` (Strait only): the route's copy mode, ``batch`` or ``record``; None is the route default."""
    runs = []
    for system in bench.order(0):
        bench.log(f"add-topics: {system} x{parallelism}, A at {rate:,.0f} rec/s, {new_topics} new topics")
        run = _add_topics_run(
            bench,
            system,
            rate,
            partitions,
            new_topics,
            new_partitions,
            new_rate,
            before_s,
            after_s,
            size,
            parallelism,
            mm2_refresh_topics_s,
            copy,
        )
        runs.append(run)
        bench.log(
            f"  -> longest gap on A {run.get('gap_a_ms')} ms (before: {run.get('baseline_gap_a_ms')} ms), "
            f"new topics' first record after {run.get('first_record_max_s')} s (max; "
            f"{run.get('first_record_after_api_max_s')} s after the first API call"
            + (
                f", {run['first_record_after_own_post_max_s']} s after its own POST"
                if run.get("first_record_after_own_post_max_s") is not None
                else ""
            )
            + f"), load {run.get('load')}, "
            f"{missing_words(run.get('verify', {}))}" + (f" FAILED: {run['error']}" if run.get("error") else "")
        )
    by = {r["system"]: r for r in runs}
    ratios = {
        key: ratio(by.get("strait", {}).get(key), by.get("mm2", {}).get(key))
        for key in ("gap_a_ms", "first_record_max_s", "first_record_median_s")
    }
    return {
        "scenario": "add-topics",
        "params": {
            "rate": rate,
            "partitions": partitions,
            "new_topics": new_topics,
            "new_partitions": new_partitions,
            "new_rate": new_rate,
            "before_s": before_s,
            "after_s": after_s,
            "size": size,
            "parallelism": parallelism,
            "mm2_refresh_topics_s": mm2_refresh_topics_s,
            "copy": copy,
        },
        "runs": runs,
        "ratios": ratios,
    }


def _add_topics_run(
    bench: Bench,
    system: str,
    rate: float,
    partitions: int,
    new_topics: int,
    new_partitions: int,
    new_rate: float,
    before_s: float,
    after_s: float,
    size: int,
    parallelism: int,
    mm2_refresh_topics_s: int,
    copy: str | None = None,
) -> dict[str, Any]:
    run_dir = bench.run_dir(topic_name("add-topics", system))
    prefix = topic_name("add", uuid.uuid4().hex[:6], system)
    topic_a = f"{prefix}-a"
    added = [f"{prefix}-new{n:02d}" for n in range(new_topics)]
    workload.create_topics(bench.src, [topic_a], partitions)
    replicator = bench.replicator(
        system,
        run_dir,
        parallelism=parallelism,
        topics_pattern=f"{prefix}-.*",
        mm2_refresh_topics_s=mm2_refresh_topics_s,
        strait_copy=copy,
    )
    result: dict[str, Any] = {
        "system": system,
        "parallelism": parallelism,
        "replicator": replicator.describe(),
        "logs": str(run_dir),
    }

    def body() -> None:
        with live(bench, run_dir, replicator) as session:
            session.warm({topic_a: partitions}, size)
            session.read([topic_a, *added], [topic_a], deadline_s=before_s + after_s + 600)
            session.produce("a", {topic_a: partitions}, rate=rate, duration_s=before_s + after_s, size=size)
            time.sleep(before_s)
            t_add_us = time.time_ns() // 1000
            result["load"] = [round(x, 2) for x in os.getloadavg()]  # when the topics were added
            workload.create_topics(bench.src, added, new_partitions)
            session.produce("new", dict.fromkeys(added, new_partitions), rate=new_rate, duration_s=after_s, size=size)
            asked = replicator.add_topics(added)
            arrivals, windows = session.finish(drain_s=90)
            a_start_us, a_end_us = windows[0]
            times_a = arrivals.arrival_times(topic_a)
            gap, gap_at = longest_gap(times_a, start_us=t_add_us - SEC, end_us=a_end_us)
            baseline, _ = longest_gap(times_a, start_us=a_start_us + SEC, end_us=t_add_us - SEC)
            firsts = {}
            for name in added:
                first = first_at_or_after(arrivals.arrival_times(name), t_add_us)
                firsts[name] = None if first is None else round((first - t_add_us) / SEC, 3)
            present = [v for v in firsts.values() if v is not None]
            api_call_s = round(asked - t_add_us / SEC, 3)
            # Strait: each topic's first record after its own POST (the POSTs are sent together,
            # each from its own thread; they may start a few milliseconds apart).
            posted = getattr(replicator, "posted_at", {})
            after_post = {
                name: round(firsts[name] - (posted[name] - t_add_us / SEC), 3)  # type: ignore[operator]
                for name in added
                if firsts[name] is not None and name in posted
            }
            if after_post:
                result.update(
                    first_record_after_own_post_s=after_post,
                    first_record_after_own_post_max_s=(
                        max(after_post.values()) if len(after_post) == len(added) else None
                    ),
                    first_record_after_own_post_median_s=statistics.median(after_post.values()),
                    t_add_unix_s=t_add_us / SEC,
                )
            result.update(
                # From the first API call (Strait: the first POST; MirrorMaker has none and finds
                # the topics by its refresh): the "after its POST", an upper bound.
                first_record_after_api_max_s=(
                    round(max(present) - api_call_s, 3) if present and len(present) == len(added) else None
                ),
                gap_a_ms=round(gap / 1000, 1),
                gap_a_at_s=round((gap_at - t_add_us) / SEC, 2),
                baseline_gap_a_ms=round(baseline / 1000, 1),
                api_call_s=api_call_s,
                first_record_s=firsts,
                first_record_max_s=max(present) if len(present) == len(added) else None,
                first_record_median_s=statistics.median(present) if present else None,
                new_topics_missing=len(added) - len(present),
                rate_a=rate_series(times_a, t_add_us),
                verify=verdict(bench, replicator, arrivals, session.expected),
            )

    return run_safely(result, body)
