"""Secrets in the configuration: ``${env:NAME}`` and ``${file:/path}`` references, and redaction.

A configuration file is shared by every node and often checked into a repository, so
passwords and tokens are referenced, not written: ``sasl.password: ${env:SRC_PASSWORD}`` or
``api_token: ${file:/run/secrets/strait-token}``. References are resolved once, at load; a
missing variable or unreadable file is a configuration error naming the key (never the value).

Every value that came from a reference, and every value of a key that holds a secret by its
name (``sasl.password``, ``api_token``, ...), is remembered in one process-wide registry.
:func:`redact` replaces them in any text, and :class:`RedactingFilter` does the same for every
log record (librdkafka's lines included, since they go through Python logging), so an error
message that quotes a client configuration cannot leak a password.
"""

from __future__ import annotations

import logging
import re
import stat
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MASK = "***"

_REFERENCE = re.compile(r"\$\{(env|file):([^}]*)\}")

# Keys whose values are secrets whatever their origin (librdkafka names and Strait's own).
SECRET_KEYS = frozenset(
    {
        "sasl.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.config",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "ssl_key_pem",
        "ssl.truststore.password",
        "api_token",
        "token",
        "password",
    }
)

# Shorter values would mask ordinary words and numbers all over the logs.
_MIN_SECRET_LENGTH = 4


class SecretError(ValueError):
    """A reference that cannot be resolved; the message names the key, never a value."""


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: frozenset[str] = frozenset()
        self._pattern: re.Pattern[str] | None = None

    def add(self, value: str) -> None:
        value = value.strip()
        if len(value) < _MIN_SECRET_LENGTH or value in self._values:
            return
        with self._lock:
            values = self._values | {value}
            # Longest first, so a secret containing another is masked whole.
            alternatives = sorted(values, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(v) for v in alternatives))
            self._values = values

    def redact(self, text: str) -> str:
        pattern = self._pattern
        return text if pattern is None else pattern.sub(MASK, text)

    def values(self) -> frozenset[str]:
        return self._values


_registry = _Registry()


def remember(value: str) -> None:
    """Treat ``value`` as a secret from now on: :func:`redact` masks it everywhere."""
    _registry.add(value)


def known_secrets() -> frozenset[str]:
    """Every secret value this process was told about (for tests that grep outputs)."""
    return _registry.values()


def redact(text: str) -> str:
    """``text`` with every known secret value replaced by ``***``."""
    return _registry.redact(text)


def redact_props(props: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of client properties fit to print: secret keys masked, other values redacted."""
    return {
        key: MASK if is_secret_key(key) else (redact(value) if isinstance(value, str) else value)
        for key, value in props.items()
    }


def is_secret_key(key: str) -> bool:
    """Whether a configuration key holds a secret by its name."""
    name = key.lower()
    return name in SECRET_KEYS or name.endswith((".password", "_password", ".secret", "_secret", "_token"))


def resolve(data: Any, environ: Mapping[str, str], path: str = "") -> Any:
    """``data`` with every ``${env:NAME}``/``${file:/path}`` in its strings resolved.

    Values of secret keys are remembered for redaction, referenced or not. Raises
    :class:`SecretError` naming the key of a reference that cannot be resolved.
    """
    if isinstance(data, Mapping):
        return {key: resolve(value, environ, f"{path}.{key}" if path else str(key)) for key, value in data.items()}
    if isinstance(data, list):
        return [resolve(value, environ, f"{path}.{index}") for index, value in enumerate(data)]
    if not isinstance(data, str):
        return data
    key = path.rpartition(".")[2]
    resolved = _REFERENCE.sub(lambda match: _lookup(match, environ, path), data)
    if resolved != data or is_secret_key(key):
        remember(resolved)
    return resolved


def referenced_files(text: str) -> list[Path]:
    """The files ``${file:/path}`` references in ``text`` name (a reload watches them too)."""
    return sorted(
        {Path(target.strip()) for kind, target in _REFERENCE.findall(text) if kind == "file" and target.strip()}
    )


def _lookup(match: re.Match[str], environ: Mapping[str, str], path: str) -> str:
    kind, target = match.group(1), match.group(2).strip()
    if not target:
        raise SecretError(f"{path}: empty ${{{kind}:}} reference")
    if kind == "env":
        if target not in environ:
            raise SecretError(f"{path}: environment variable {target} is not set")
        return environ[target]
    return _read_file(Path(target), path)


def _read_file(file: Path, path: str) -> str:
    try:
        mode = file.stat().st_mode
        text = file.read_text()
    except OSError as exc:
        raise SecretError(f"{path}: cannot read secret file {file}: {exc.strerror}") from exc
    if mode & stat.S_IROTH:
        log.warning("secret file %s (for %s) is readable by every user; chmod o-r it", file, path)
    # Files written by `echo` or editors end with a newline that is no part of the secret.
    return text.rstrip("\r\n")


class RedactingFilter(logging.Filter):
    """Masks known secrets in every log record passing a handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _registry.values():
            return True
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            text = logging.Formatter().formatException(record.exc_info)
            cleaned = redact(text)
            if cleaned != text:
                # The traceback quotes a secret (an exception message): keep it, masked.
                record.exc_text, record.exc_info = cleaned, None
        return True


def install_log_redaction() -> None:
    """Mask secrets in everything the root logger's handlers write (call after logging set-up)."""
    root = logging.getLogger()
    for handler in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
