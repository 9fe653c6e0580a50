"""What to do with a produced batch given the partition's error code: a pure table.

It follows the Java producer's handling for an idempotent (or transactional) producer
(``Sender.completeBatch`` and ``TransactionManager``), for whole batches:

- ``OK``: appended; ``DUPLICATE_SEQUENCE_NUMBER`` counts as appended too (the broker has it
  from an earlier try and says so instead of appending it twice);
- ``RETRY``: send the same bytes again, same sequence, after the batches before it (leader
  moved, replicas short, timeouts); ``refresh_leader`` says whether to ask for metadata first;
- ``NEW_EPOCH``: the broker lost or refused our sequence state (``OUT_OF_ORDER_SEQUENCE_NUMBER``
  after a batch failed for good, ``UNKNOWN_PRODUCER_ID`` once retention removed our last
  batch): InitProducerId again and renumber what is in flight from 0 (``SequenceModel.new_epoch``);
- ``RECORD_MODE``: this batch cannot pass as it is (too large for the destination, refused as a
  record set, timestamps outside the topic's bounds): copy its records one by one instead;
- ``FENCED``: another producer took our transactional id: stop, as the record pipelines do;
- ``FATAL``: anything else not retriable (authorization, unknown errors): the partition waits
  and starts again from its checkpoint, reported with the error's name.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Outcome(enum.Enum):
    OK = "ok"
    RETRY = "retry"
    NEW_EPOCH = "new_epoch"
    RECORD_MODE = "record_mode"
    FENCED = "fenced"
    FATAL = "fatal"


@dataclass(frozen=True, slots=True)
class ProduceOutcome:
    outcome: Outcome
    error: str  # the broker's error name, "" for NONE
    refresh_leader: bool = False
    duplicate: bool = False


NONE = 0
# Codes by their Kafka names: 2 CORRUPT_MESSAGE, 3 UNKNOWN_TOPIC_OR_PARTITION, 5 LEADER_NOT_AVAILABLE,
# 6 NOT_LEADER_OR_FOLLOWER, 7 REQUEST_TIMED_OUT, 10 MESSAGE_TOO_LARGE (kafka-python: MESSAGE_SIZE_TOO_LARGE),
# 13 NETWORK_EXCEPTION,
# 18 RECORD_LIST_TOO_LARGE, 19 NOT_ENOUGH_REPLICAS, 20 NOT_ENOUGH_REPLICAS_AFTER_APPEND,
# 32 INVALID_TIMESTAMP, 43 UNSUPPORTED_FOR_MESSAGE_FORMAT, 45 OUT_OF_ORDER_SEQUENCE_NUMBER,
# 46 DUPLICATE_SEQUENCE_NUMBER, 47 INVALID_PRODUCER_EPOCH, 51 CONCURRENT_TRANSACTIONS,
# 56 KAFKA_STORAGE_ERROR, 59 UNKNOWN_PRODUCER_ID, 74 FENCED_LEADER_EPOCH, 75 UNKNOWN_LEADER_EPOCH,
# 87 INVALID_RECORD, 90 PRODUCER_FENCED.
_REFRESH = {3, 5, 6, 74, 75, 56}
_RETRY = {7, 13, 19, 20, 51} | _REFRESH
_RECORD_MODE = {2, 10, 18, 32, 43, 87}
_NEW_EPOCH = {45, 59}
_FENCED = {90}


def error_name(code: int) -> str:
    """kafka-python's name of an error code ("" for none)."""
    if code == NONE:
        return ""
    import kafka.errors as errors

    return str(getattr(errors.for_code(code), "message", f"ERROR_{code}"))


def produce_outcome(code: int, *, transactional: bool = False) -> ProduceOutcome:
    """The action for one partition's answer to a produce request (see the module docstring).

    ``INVALID_PRODUCER_EPOCH`` means another producer bumped the epoch: fenced for a
    transactional producer, a new epoch for an idempotent one (nobody else uses its id).
    """
    name = error_name(code)
    if code == NONE:
        return ProduceOutcome(Outcome.OK, "")
    if code == 46:
        return ProduceOutcome(Outcome.OK, name, duplicate=True)
    if code in _RETRY:
        return ProduceOutcome(Outcome.RETRY, name, refresh_leader=code in _REFRESH)
    if code in _RECORD_MODE:
        return ProduceOutcome(Outcome.RECORD_MODE, name)
    if code in _NEW_EPOCH:
        return ProduceOutcome(Outcome.NEW_EPOCH, name)
    if code in _FENCED or (code == 47 and transactional):
        return ProduceOutcome(Outcome.FENCED, name)
    if code == 47:
        return ProduceOutcome(Outcome.NEW_EPOCH, name)
    import kafka.errors as errors

    if getattr(errors.for_code(code), "retriable", False):
        return ProduceOutcome(Outcome.RETRY, name, refresh_leader=True)
    return ProduceOutcome(Outcome.FATAL, name)
