"""Disk- and rack-aware partition balancing (Meituan's rebalancer), through Kafka's admin APIs.

Layers, each importing only those below it:

- `model`, `plan`, `goals`, `capacity`, `planner`, `operations`, `invariants`: pure planning, no I/O
  (`capacity`: disk sizes given by people, and the refusal where brokers cannot size their disks;
  `settings`: the `balance:` part of the configuration file; `traffic`: per-partition rates
  from two samples and broker loads; `loads`, `leaders`, `tiers`: the traffic and SSD/HDD phases).
- `headroom`, `window`, `throttle`: pure scheduling (room on destination disks, caps) and throttle
  bookkeeping (throttle applies through a gateway); `progress`: move states and snapshots.
- `gateway` (Kafka admin calls), `sampler` (traffic samples: ListOffsets, DescribeLogDirs,
  group offsets), `state` (the `__strait_balance` state topic): the I/O edges.
- `executor`: the sliding-window run loop and resume; `kafka_moves`: stale/applied checks and cancel;
  `service`: calls for a REST layer; `runner`: the background process behind `--detach`.
"""
