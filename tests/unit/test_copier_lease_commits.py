"""A copier commits no checkpoint while its worker's lease is not confirmed (cut off, or frozen
past its session): the partitions may be someone else's, and a late commit could move the new
owner's checkpoint back."""

from __future__ import annotations

from strait.worker.lease import Lease
from tests.unit.test_worker_copier import FakePipeline, _task, lease_copier, turn


def test_no_checkpoint_is_committed_without_a_confirmed_lease_not_even_the_final_one() -> None:
    lease = Lease(valid_for_s=60)
    lease.confirm()
    copier, checkpoints = lease_copier(lease)
    task = _task(0)
    copier.assign([task])
    turn(copier)
    realtime: FakePipeline = copier._realtime  # type: ignore[assignment]
    state = realtime.states[task]
    realtime.send(state, 0, 1, 2)
    realtime.ack(state, 0, 1, 2)
    turn(copier)
    assert checkpoints.committed.get(task) == 3
    lease.revoke()  # the session is in doubt
    realtime.send(state, 3, 4)
    realtime.ack(state, 3, 4)
    for _ in range(3):
        turn(copier)
    assert checkpoints.committed[task] == 3
    copier.stop(drain=False, timeout_s=1)
    assert checkpoints.history(task)[-1] == 3  # the final commit was refused too
