"""Real Apache Kafka (KRaft) clusters and a ZooKeeper on 127.0.0.1, for demos, tests and benchmarks."""

from strait.sandbox.errors import SandboxError
from strait.sandbox.sandbox import ClusterState, Sandbox, SandboxSpec, default_state_dir
from strait.sandbox.security import SecurityMode

__all__ = ["ClusterState", "Sandbox", "SandboxError", "SandboxSpec", "SecurityMode", "default_state_dir"]
