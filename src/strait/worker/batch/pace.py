"""The batch pipeline's fetch rate, guarded by the realtime partitions' own latency (no I/O).

While a worker's realtime record pipeline copies partitions next to a draining backlog, every
byte the backlog's batch pipeline fetches costs the realtime records the machine's CPU (the
brokers' on a shared machine, and cores the realtime loop needs): a fixed pace is either too
fast for a loaded machine or too slow for an idle one. :class:`LatencyPace` sets the pace from
what the realtime records see, once per window (the copier's one-second classification):

- a window whose p99 (source timestamp to destination acknowledgement, realtime pipeline only)
  is over the budget cuts the rate: by ``budget / p99``, at least to ``mild_cut`` and at most
  to ``cut`` (one window's p99 is the tenth-slowest of a thousand records: a window just over
  the budget is as often noise as a rate past the knee, and halving on it cost a drain seconds);
- one within it lets the rate grow: by ``grow`` until the first cut (a backlog reaches a fast
  pace in a few seconds on an idle machine); after a cut, by ``grow`` again up to ``recover``
  times the rate that went over, and by ``step`` beyond it, a step that doubles with each
  window in a row within budget (``probe_growth``) but never grows the rate faster than
  ``grow``: near the rate the machine can take each probe past it is small, so the realtime
  tail rises less (a quiet run that grew 1.25x a second past its last cut overshot to
  11-15 MB/s with window p99s of 108-198 ms against a 33.5 ms budget), while a cut the machine
  did not need (a window's tail that was noise) costs seconds, not the drain (fixed 1 MB/s
  steps after an early cut to 9 MB/s drained 2,000,000 records in 15 s where an uncut pace
  took 6.6 s);
- the rate stays within [floor, ceiling]: the floor makes every backlog drain, however busy the
  machine;
- a window with fewer than ``min_samples`` realtime records says nothing: the rate holds;
- a window in which a partition that had just caught up a backlog may have finished in the
  realtime pipeline, or in which a realtime partition fell behind by a backlog and copied some
  of it before moving out (``arriving``), neither cuts nor teaches the baseline: such records
  are as old as the backlog and would set the p99 with a wait that is the backlog's, and the
  realtime records queued behind them waited for the realtime pipeline, not for the backlog's
  pace. Within the budget it grows as usual (old records can only raise a p99). A cut whose
  next window finds a realtime partition behind by a backlog (``leaving``) is taken back: a
  backlog that appears at once shows as lag only at the realtime pipeline's next end-offset
  refresh, so the window in which its records queued the realtime ones can end before anyone
  knew;
- the budget is ``budget_s`` when given, else ``budget_ratio`` times the baseline, the realtime
  p99 learned in quiet windows (the batch pipeline moved less than ``quiet_bytes`` in them),
  within [``min_budget_s``, ``max_budget_s``]; before any quiet window, ``default_budget_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

# The baseline follows quiet windows with this weight for the newest one (a moving average: one
# slow window does not set the budget).
BASELINE_WEIGHT = 0.2


@dataclass(frozen=True)
class PaceSettings:
    """Rates in bytes per second, latencies in seconds."""

    floor: float
    ceiling: float
    start: float
    budget_s: float | None = None
    budget_ratio: float = 2.0
    default_budget_s: float = 0.05
    min_budget_s: float = 0.01
    # A learned budget never above this: a baseline learned from records that were old when
    # copied (realtime partitions still catching up their last few thousand) must not turn the
    # pace off for a whole drain.
    max_budget_s: float = 0.5
    grow: float = 1.25
    step: float = 1_000_000.0
    cut: float = 0.5
    mild_cut: float = 0.8
    recover: float = 0.9
    probe_growth: float = 2.0
    min_samples: int = 20
    quiet_bytes: int = 256 * 1024

    def __post_init__(self) -> None:
        if not 0 < self.floor <= self.ceiling:
            raise ValueError(f"a pace needs 0 < floor <= ceiling, got {self.floor} and {self.ceiling}")
        if not (
            self.grow > 1
            and 0 < self.cut <= self.mild_cut < 1
            and self.step > 0
            and 0 < self.recover <= 1
            and self.probe_growth >= 1
        ):
            raise ValueError(
                f"a pace grows by more than 1 (and a positive step that does not shrink), cuts by less "
                f"(cut <= mild_cut) and recovers to at most the rate it cut, got {self.grow}, {self.step}, "
                f"{self.probe_growth}, {self.cut}, {self.mild_cut} and {self.recover}"
            )


@dataclass(frozen=True)
class Window:
    """What one window showed: the realtime records' p99 (None: none observed), how many there
    were, the bytes the batch pipeline fetched meanwhile, whether a backlog's records may have
    been among the realtime ones (``arriving``), and whether that was because a realtime
    partition fell behind by a backlog (``leaving``, which implies ``arriving`` in the worker)."""

    p99_s: float | None
    samples: int
    batch_bytes: int
    arriving: bool = False
    leaving: bool = False


class LatencyPace:
    """The fetch rate, one decision per :class:`Window`."""

    def __init__(self, settings: PaceSettings) -> None:
        self.settings = settings
        self.rate = min(settings.ceiling, max(settings.floor, settings.start))
        self.baseline_s: float | None = None
        self.cuts = 0
        # The rate the last cut came from: growth is multiplicative up to ``recover`` times it.
        self.cut_from: float | None = None
        # The rate and cut_from before the last window's cut, while the next window may take it back.
        self._undo: tuple[float, float | None] | None = None
        # Windows in a row that grew by a step past the recovery point (the next step's doubling).
        self.probes = 0
        self.last: str = "start"  # the last decision, for the log and tests

    def budget(self) -> float:
        """The realtime p99 the pace keeps under, in seconds."""
        s = self.settings
        if s.budget_s is not None:
            return s.budget_s
        if self.baseline_s is None:
            return s.default_budget_s
        return min(s.max_budget_s, max(s.min_budget_s, s.budget_ratio * self.baseline_s))

    def step(self, window: Window, *, paced: bool) -> float:
        """The rate after ``window``; ``paced``: the batch pipeline shared the worker during it
        (else the window only teaches the baseline)."""
        s = self.settings
        undo, self._undo = self._undo, None
        if window.p99_s is None or window.samples < s.min_samples:
            self.last = "hold: too few realtime records"
            return self.rate
        if window.batch_bytes < s.quiet_bytes:
            if window.arriving or window.leaving:
                self.last = "hold: a backlog's records in the realtime pipeline"
                return self.rate
            # The realtime records' latency without a backlog beside them.
            known = self.baseline_s
            self.baseline_s = window.p99_s if known is None else known + BASELINE_WEIGHT * (window.p99_s - known)
            self.last = "quiet: baseline"
            return self.rate
        if not paced:
            self.last = "hold: not sharing"
            return self.rate
        if window.leaving and undo is not None:
            self.rate, self.cut_from = undo
            self.last = "retract: the cut window held a backlog's records"
            return self.rate
        if window.p99_s > self.budget():
            if window.arriving or window.leaving:
                self.last = "hold: a backlog's records in the realtime pipeline"
                return self.rate
            self._undo = (self.rate, self.cut_from)
            self.probes = 0
            self.cut_from = self.rate
            self.rate = max(s.floor, self.rate * cut_factor(s, self.budget(), window.p99_s))
            self.cuts += 1
            self.last = "cut"
        else:
            probing = self.cut_from is not None and self.rate >= self.cut_from * s.recover
            self.rate = min(s.ceiling, grown(s, self.rate, self.cut_from, self.probes))
            self.probes = self.probes + 1 if probing else 0
            self.last = "grow"
        return self.rate


def cut_factor(settings: PaceSettings, budget_s: float, p99_s: float) -> float:
    """What a window over budget multiplies the rate by: in proportion to the overshoot, within
    [cut, mild_cut]."""
    return max(settings.cut, min(settings.mild_cut, budget_s / p99_s))


def grown(settings: PaceSettings, rate: float, cut_from: float | None, probes: int = 0) -> float:
    """The rate after a window within budget (before the ceiling): multiplied by ``grow`` until
    the first cut and, after one, up to ``recover`` times the rate it cut; above, by ``step``
    times ``probe_growth`` for each of the ``probes`` windows in a row that grew there, at least
    ``step`` and otherwise no more than ``grow`` would."""
    if cut_from is None:
        return rate * settings.grow
    recovered = cut_from * settings.recover
    if rate < recovered:
        return min(recovered, rate * settings.grow)
    probe = settings.step * settings.probe_growth ** min(probes, 30)
    return rate + max(settings.step, min(probe, rate * (settings.grow - 1)))
