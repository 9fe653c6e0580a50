"""Log output of long-running processes: ``text`` (the default) or ``json``, one object a line.

Both go to stderr through one handler on the root logger, behind the same
:class:`~strait.secrets.RedactingFilter`: a secret is masked before either formatter sees the
record, so a JSON line never carries what a text line would not. A JSON line holds ``ts``
(UTC, ISO 8601, milliseconds), ``level``, ``logger`` and ``message``, plus ``exception`` (the
traceback) and ``stack`` when the record has them.

:func:`configure` also exports the chosen format as ``_STRAIT_LOG_FORMAT``, so processes this one
starts (the background balance executor, ``strait.balancer.runner``) log the same way. Not
``STRAIT_LOG_FORMAT``: every ``STRAIT_*`` variable overrides a configuration key, and an unknown
key is refused when the configuration loads.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from enum import StrEnum

from strait.secrets import install_log_redaction

ENV = "_STRAIT_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogFormat(StrEnum):
    text = "text"
    json = "json"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ts, level, logger, message (+ exception, stack)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, str] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        # The redacting filter may have replaced exc_info by a masked exc_text: use that first.
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False)


def formatter(fmt: LogFormat | str) -> logging.Formatter:
    """The formatter for ``fmt`` (``text`` or ``json``); ValueError for anything else."""
    return JsonFormatter() if LogFormat(fmt) is LogFormat.json else logging.Formatter(TEXT_FORMAT)


def from_environment(default: LogFormat = LogFormat.text) -> LogFormat:
    """The format a parent process asked for in ``_STRAIT_LOG_FORMAT`` (unknown values: ``default``)."""
    value = os.environ.get(ENV, "").strip().lower()
    return LogFormat(value) if value in LogFormat.__members__ else default


def configure(level: int | str, fmt: LogFormat | str = LogFormat.text) -> None:
    """Log to stderr at ``level`` in ``fmt``, secrets masked; a no-op where logging is already set up
    (as ``logging.basicConfig``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(fmt))
    logging.basicConfig(level=level.upper() if isinstance(level, str) else level, handlers=[handler])
    install_log_redaction()
    os.environ[ENV] = LogFormat(fmt).value
