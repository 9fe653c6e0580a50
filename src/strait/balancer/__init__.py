"""Disk- and rack-aware partition balancing (Meituan's rebalancer), through Kafka's admin APIs.

Layers, each importing only those below it:

- `model`, `plan`, `goals`, `planner`, `operations`, `invariants`: pure planning, no I/O.
- `window`, `throttle`: pure scheduling and throttle bookkeeping (throttle applies through a gateway).
- `gateway` (Kafka admin calls), `state` (the `__strait_balance` state topic): the I/O edges.
- `executor`: the sliding-window run loop, cancel and resume; `service`: calls for a REST layer;
  `runner`: the background process behind `--detach`.
"""
