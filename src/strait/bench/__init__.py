"""Benchmarks of Strait against MirrorMaker 2 on the same sandbox clusters, and the record verifier.

Every benchmark record carries its source partition, a per-partition sequence number and its
send time (``records``), so an independent reader of the destination (``reader``) can measure
end-to-end latency and arrival gaps, and the ``verifier`` can count every record lost,
duplicated or reordered. ``mirrormaker`` and ``straitrun`` start the two replicators the same
way from rendered configuration files; ``scenarios`` runs them alternately in one sandbox.
"""

from strait.bench.records import Stamp, decode, encode
from strait.bench.verifier import PartitionReport, Verifier, VerifyReport

__all__ = ["PartitionReport", "Stamp", "Verifier", "VerifyReport", "decode", "encode"]
