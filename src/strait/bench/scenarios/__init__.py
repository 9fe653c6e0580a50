"""The benchmark scenarios: each runs Strait and MirrorMaker 2 alternately on one sandbox.

Every run copies its own freshly created topics (names carry the system and the run), so no
run sees another's data, and every run ends with the verifier over the whole destination
topic. Scenario functions return plain dicts (the JSON written under ``bench/results/``);
``strait.bench.report`` turns them into tables and plots.
"""

from strait.bench.scenarios.add_topics import add_topics
from strait.bench.scenarios.delivery import delivery
from strait.bench.scenarios.failover import failover
from strait.bench.scenarios.failure import worker_failure
from strait.bench.scenarios.harness import SYSTEMS, Bench
from strait.bench.scenarios.isolation import isolation
from strait.bench.scenarios.latency import latency
from strait.bench.scenarios.smoke import smoke
from strait.bench.scenarios.throughput import throughput

__all__ = [
    "SYSTEMS",
    "Bench",
    "add_topics",
    "delivery",
    "failover",
    "isolation",
    "latency",
    "smoke",
    "throughput",
    "worker_failure",
]
