"""`strait --version` prints the installed package's version and nothing else."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

from strait.cli.main import app


def test_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"strait {version('strait')}"


def test_version_is_listed_in_the_help() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "--version" in result.output


def test_subcommands_still_run_after_the_root_callback() -> None:
    result = CliRunner().invoke(app, ["topics", "--help"])
    assert result.exit_code == 0
    assert "Add, remove and list replicated topics." in result.output
