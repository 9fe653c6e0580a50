"""The sandbox's JVM command lines (no JVM is started: Popen is replaced)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from strait.sandbox import process


def test_extra_options_follow_the_sandbox_s_own_so_they_win(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    started: list[list[str]] = []

    class _Popen:
        pid = 4321

        def __init__(self, cmd: list[str], **kwargs: Any) -> None:
            started.append(cmd)

    monkeypatch.setattr(process.subprocess, "Popen", _Popen)
    monkeypatch.setattr(process, "java_binary", lambda: "java")
    pid = process.spawn_java(
        classpath="cp",
        main_class="kafka.Kafka",
        args=["server.properties"],
        log_file=tmp_path / "broker.log",
        extra_options=["-Xms384m", "-Xlog:gc"],
    )
    cmd = started[0]
    assert pid == 4321
    # The JVM takes the last of a repeated option: the extra -Xms replaces the sandbox's -Xms64m.
    assert cmd.index("-Xms64m") < cmd.index("-Xms384m") < cmd.index("kafka.Kafka")
    assert cmd[-2:] == ["kafka.Kafka", "server.properties"] and "-Xlog:gc" in cmd
