"""A description of the machine a benchmark ran on, recorded with every result."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from strait.sandbox import process


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gb() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def _java_version() -> str:
    try:
        out = subprocess.run(
            [process.java_binary(), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except Exception:
        return "unknown"
    lines = (out.stderr or out.stdout).strip().splitlines()
    return lines[0] if lines else "unknown"


def describe() -> dict[str, Any]:
    """CPU, cores, memory, kernel, Python and Java versions, and the load when the run began."""
    load = os.getloadavg()
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "java": _java_version(),
        "kafka_broker": "Apache Kafka 4.4.0 (KRaft, 1 broker per cluster, sandbox)",
        "mirrormaker": "connect-mirror 4.3.1 (newest on Maven Central here)",
        "load_average_at_start": [round(x, 2) for x in load],
    }
