"""`--log-format json`: one JSON object per line, secrets masked exactly as in text."""

from __future__ import annotations

import io
import json
import logging
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from strait import logformat
from strait.logformat import ENV, JsonFormatter, LogFormat
from strait.secrets import MASK, RedactingFilter, remember


def _handler(fmt: LogFormat) -> tuple[logging.Logger, io.StringIO]:
    """A logger writing through the handler `configure` builds (formatter + redacting filter)."""
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    handler.setFormatter(logformat.formatter(fmt))
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger(f"strait.test.{uuid.uuid4().hex}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    return logger, sink


def _lines(sink: io.StringIO) -> list[dict[str, str]]:
    return [json.loads(line) for line in sink.getvalue().splitlines()]


def test_every_line_is_one_json_object_with_ts_level_logger_message() -> None:
    logger, sink = _handler(LogFormat.json)
    logger.info("partition %s moved to %s", "orders-3", "w2")
    logger.warning('quotes " and\nnewlines stay one line')
    first, second = _lines(sink)
    assert len(sink.getvalue().splitlines()) == 2
    assert first["level"] == "INFO" and first["logger"] == logger.name
    assert first["message"] == "partition orders-3 moved to w2"
    assert first["ts"].endswith("Z") and datetime.fromisoformat(first["ts"])
    assert "exception" not in first
    assert second["level"] == "WARNING" and second["message"] == 'quotes " and\nnewlines stay one line'


def test_an_exception_is_carried_as_its_traceback_text() -> None:
    logger, sink = _handler(LogFormat.json)
    try:
        raise RuntimeError("broker went away")
    except RuntimeError:
        logger.exception("copy failed")
    (line,) = _lines(sink)
    assert line["level"] == "ERROR" and line["message"] == "copy failed"
    assert line["exception"].startswith("Traceback") and "RuntimeError: broker went away" in line["exception"]


def test_a_registered_secret_is_masked_in_json_as_in_text() -> None:
    secret = f"pw-{uuid.uuid4().hex}"
    remember(secret)
    outputs = {}
    for fmt in LogFormat:
        logger, sink = _handler(fmt)
        logger.error("auth with %s failed", secret)
        try:
            raise PermissionError(f"SASL refused password {secret}")
        except PermissionError:
            logger.exception("connect failed")
        outputs[fmt] = sink.getvalue()
        assert secret not in outputs[fmt]
    message, error = _lines(io.StringIO(outputs[LogFormat.json]))
    assert message["message"] == f"auth with {MASK} failed"
    assert MASK in error["exception"] and secret not in error["exception"]
    assert f"auth with {MASK} failed" in outputs[LogFormat.text]


def test_text_keeps_the_format_it_had() -> None:
    logger, sink = _handler(LogFormat.text)
    logger.warning("hello")
    assert sink.getvalue().rstrip().endswith(f" WARNING {logger.name}: hello")


def test_configure_logs_json_to_stderr_and_tells_child_processes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    monkeypatch.setenv(ENV, "text")
    secret = f"tok-{uuid.uuid4().hex}"
    remember(secret)
    logformat.configure("info", "json")
    logging.getLogger("strait.test").info("token %s", secret)
    assert logformat.from_environment() is LogFormat.json
    (line,) = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    assert line == {"ts": line["ts"], "level": "INFO", "logger": "strait.test", "message": f"token {MASK}"}


def test_the_background_executor_reads_the_format_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "json")
    assert logformat.from_environment() is LogFormat.json
    monkeypatch.setenv(ENV, "bogus")
    assert logformat.from_environment() is LogFormat.text
    monkeypatch.delenv(ENV)
    assert logformat.from_environment() is LogFormat.text


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError):
        logformat.formatter("xml")
    assert isinstance(logformat.formatter("json"), JsonFormatter)


@pytest.mark.parametrize(
    "command",
    [
        ["controller"],
        ["worker"],
        ["balance", "execute"],
        ["balance", "drain"],
        ["balance", "fill"],
        ["balance", "fix-racks"],
        ["balance", "tiers"],
    ],
)
def test_long_running_commands_offer_log_format(command: list[str]) -> None:
    from strait.cli.main import app

    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "--log-format" in result.output
    refused = CliRunner().invoke(app, [*command, "--log-format", "xml"])
    assert refused.exit_code == 2 and "xml" in refused.output


def test_balance_execute_hands_its_format_to_the_background_executor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from strait.cli.main import app

    monkeypatch.setenv(ENV, "text")
    result = CliRunner().invoke(
        app,
        [
            "balance",
            "execute",
            "--bootstrap",
            "127.0.0.1:1",
            "--plan",
            str(tmp_path / "none.json"),
            "--log-format",
            "json",
        ],
    )
    assert result.exit_code == 2  # the plan is missing; logging was set up before that
    assert logformat.from_environment() is LogFormat.json


def test_controller_and_worker_set_up_logging_in_the_chosen_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import strait.controller.server
    import strait.worker.process
    from strait.cli.controller import controller
    from strait.cli.worker import worker

    config = tmp_path / "strait.yaml"
    config.write_text("clusters: {a: {bootstrap.servers: 'h:1'}}\nroutes: [{name: r, source: a, destination: a}]\n")
    calls: list[tuple[object, object]] = []
    monkeypatch.setattr(logformat, "configure", lambda level, fmt: calls.append((level, fmt)))
    monkeypatch.setattr(strait.controller.server, "serve", lambda *a, **k: None)
    monkeypatch.setattr(strait.worker.process, "run_worker", lambda *a, **k: None)
    controller(config=config, listen=None, controller_id=None, log_level="INFO", log_format=LogFormat.json)
    worker(config=config, worker_id="w1", pool=None, log_level="DEBUG", log_format=LogFormat.json)
    worker(config=config, worker_id="w1", pool=None, log_level="INFO")
    assert calls == [("INFO", LogFormat.json), ("DEBUG", LogFormat.json), ("INFO", LogFormat.text)]


def test_the_background_executor_process_logs_json_when_its_parent_chose_it() -> None:
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        ENV: "json",
        # Nothing listens on port 1: the runner logs connection failures at once.
        "STRAIT_BALANCE_PROPS": json.dumps({"bootstrap.servers": "127.0.0.1:1"}),
    }
    runner = subprocess.Popen(
        [sys.executable, "-m", "strait.balancer.runner", "--execution", "x"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert runner.stderr is not None
        first = runner.stderr.readline()
    finally:
        runner.kill()
        runner.wait()
    line = json.loads(first)
    assert set(line) >= {"ts", "level", "logger", "message"}
