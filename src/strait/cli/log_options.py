"""The ``--log-format`` option of every long-running command (see ``strait.logformat``).

Used as ``log_format: Annotated[LogFormat, LOG_FORMAT] = LogFormat.text``, so a command called
as a plain function gets the text default too.
"""

from __future__ import annotations

import typer

LOG_FORMAT = typer.Option(
    "--log-format",
    case_sensitive=False,
    help="Log lines on stderr as text, or json: one JSON object per line (ts, level, logger, message, exception), "
    "secrets masked as in text. Background processes this command starts log the same way.",
)
