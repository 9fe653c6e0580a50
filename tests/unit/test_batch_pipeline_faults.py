"""The batch pipeline when topics change under it: a source topic that grew, a destination
topic deleted (simulated clusters of tests.unit.test_batch_pipeline)."""

from __future__ import annotations

from kafka.future import Future

from strait.worker.batch.link import Key
from strait.worker.batch.protocol import WireError
from tests.unit.test_batch_pipeline import FakeDestination, payloads, run, setup, source_log, start


def test_partitions_added_to_a_topic_are_copied() -> None:
    # Leaders kept until a leader moves would leave a partition the topic gains later without
    # a leader, never fetched.
    logs = {("t", 0): source_log(3)}
    pipeline, src, dst = setup(logs)
    first = start(pipeline, "t", 0)
    run(pipeline, lambda: first.checkpoint == src.end(("t", 0)))
    logs[("t", 1)] = source_log(2)
    second = start(pipeline, "t", 1)
    run(pipeline, lambda: second.checkpoint == src.end(("t", 1)), steps=400)
    assert dst.payloads(("t", 1)) == payloads(logs[("t", 1)])


class DeletedDestination(FakeDestination):
    """Answers UNKNOWN_TOPIC_OR_PARTITION to produce and metadata once ``deleted``."""

    deleted = False

    def leaders(self, topic: str) -> dict[int, int]:
        if self.deleted:
            raise WireError(f"metadata of {topic}: UNKNOWN_TOPIC_OR_PARTITION", 3)
        return super().leaders(topic)

    def produce(self, node: int, batches: dict[Key, bytes], **kwargs: object) -> Future:
        if not self.deleted:
            return super().produce(node, batches, **kwargs)
        self.requests += 1
        responses = [
            _obj(name=t, partition_responses=[_obj(index=p, error_code=3, base_offset=-1)]) for t, p in batches
        ]
        return Future().success(_obj(responses=responses))


def _obj(**fields: object) -> object:
    from types import SimpleNamespace

    return SimpleNamespace(**fields)


def test_a_deleted_destination_topic_fails_its_partition() -> None:
    logs = {("t", 0): source_log(3)}
    dst = DeletedDestination()
    pipeline, src, _ = setup(logs, destination=dst)
    state = start(pipeline, "t", 0)
    run(pipeline, lambda: state.checkpoint == src.end(("t", 0)))
    dst.deleted = True
    pipeline._leaders.forget("destination", ["t"])  # as a NOT_LEADER answer would
    logs[("t", 0)] += source_log(2, start=12)
    run(pipeline, lambda: state.error is not None, steps=2000)
    assert state.error is not None and "destination t/0 does not exist" in state.error, state.error
    assert not state.fetching and state.checkpoint == 12


def test_a_refused_write_waits_says_who_refused_and_copies_once_allowed() -> None:
    # As record mode does: the partition waits (ACCESS_RETRY_S) and names the refusal in its
    # state, then resends from its checkpoint; before, batch mode rewound at once, unexplained.
    logs = {("t", 0): source_log(6)}
    pipeline, src, dst = setup(logs)
    state = start(pipeline, "t", 0)
    dst.faults = [29, 29]  # TOPIC_AUTHORIZATION_FAILED (an ACL denies the write), then allowed again
    run(pipeline, lambda: state.waiting is not None, steps=400)
    assert "no ACL allows this on the topic t (TOPIC_AUTHORIZATION_FAILED)" in state.waiting
    assert state.error is None and state.checkpoint == 0
    run(pipeline, lambda: state.checkpoint == src.end(("t", 0)), steps=4000)
    assert state.waiting is None and state.rewinds >= 1
    assert dst.payloads(("t", 0)) == payloads(logs[("t", 0)])
