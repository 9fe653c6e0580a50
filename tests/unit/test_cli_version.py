"""`strait --version` prints the installed package's version and the commit it was built from."""

from __future__ import annotations

import re
from importlib.metadata import version

from typer.testing import CliRunner

from strait.cli.main import app


def test_version_prints_the_package_version_and_commit() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    expected = rf"strait {re.escape(version('strait'))} \(commit [0-9a-f]{{7,}}(\+changes)?\)"
    assert re.fullmatch(expected, result.output.strip())


def test_version_is_listed_in_the_help() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "--version" in result.output


def test_subcommands_still_run_after_the_root_callback() -> None:
    result = CliRunner().invoke(app, ["topics", "--help"])
    assert result.exit_code == 0
    assert "Add, remove and list replicated topics." in result.output
