"""The real `strait controller` / `strait worker` commands refuse a malformed configuration file:
exit status 2 and a message on stderr naming the key, before connecting to anything.
(The many malformed shapes are covered in-process by tests/unit/test_bad_input.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_bad_input import GOOD

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("command", ["controller", "worker"])
def test_the_real_command_exits_non_zero_on_stderr(tmp_path: Path, command: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("destination: dst", "destination: nowhere"))
    done = subprocess.run(
        [sys.executable, "-m", "strait", command, "--config", str(path), "--id", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert "routes.0.destination: unknown cluster 'nowhere'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
