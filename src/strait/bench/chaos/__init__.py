"""The chaos benchmark: a seeded fault schedule against a real fleet, every record checked.

`schedule` draws the faults (pure, seeded), `check` judges the copy (pure); `runner` does the
I/O of one run with `inject` (faults), `load` (sequence-numbered records), `starve` (CPU hog)
and `readback` (reading the clusters); `outcome` builds the result document and `report`
saves it and renders `RELIABILITY.md`.
"""

from strait.bench.chaos.runner import ChaosOptions, run
from strait.bench.chaos.schedule import KINDS, Fault, FaultKind, Schedule, ScheduleParams, generate

__all__ = ["KINDS", "ChaosOptions", "Fault", "FaultKind", "Schedule", "ScheduleParams", "generate", "run"]
