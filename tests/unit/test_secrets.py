"""Secret references in the configuration, and their masking in logs and errors."""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import pytest

from strait.config import ConfigError, parse_config
from strait.secrets import (
    MASK,
    RedactingFilter,
    SecretError,
    is_secret_key,
    known_secrets,
    redact,
    redact_props,
    resolve,
)


def _secret() -> str:
    return f"s3cret-{uuid.uuid4().hex}"


def _raw(cluster: dict[str, object], **controller: object) -> dict[str, object]:
    return {
        "clusters": {"src": cluster, "dst": {"bootstrap.servers": "127.0.0.1:2"}},
        "routes": [{"name": "main", "source": "src", "destination": "dst"}],
        "controller": controller,
    }


def test_env_and_file_references_resolve_at_load(tmp_path: Path) -> None:
    password, token = _secret(), _secret()
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    config = parse_config(
        _raw(
            {"bootstrap.servers": "127.0.0.1:1", "sasl.username": "strait", "sasl.password": "${env:SRC_PASSWORD}"},
            api_token=f"${{file:{token_file}}}",
        ),
        {"SRC_PASSWORD": password},
    )
    assert config.clusters["src"]["sasl.password"] == password
    assert config.controller.api_token == token  # the file's trailing newline is no part of it
    assert {password, token} <= known_secrets()


def test_a_reference_inside_a_longer_value_is_replaced_in_place() -> None:
    resolved = resolve({"bootstrap.servers": "${env:HOST}:9093"}, {"HOST": "kafka-1"})
    assert resolved == {"bootstrap.servers": "kafka-1:9093"}


def test_a_missing_variable_names_the_key_and_the_variable_only() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(_raw({"bootstrap.servers": "x", "sasl.password": "${env:NOT_SET_ANYWHERE}"}), {})
    message = str(info.value)
    assert "clusters.src.sasl.password" in message and "NOT_SET_ANYWHERE" in message


def test_an_unreadable_file_names_the_key_and_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError) as info:
        parse_config(_raw({"bootstrap.servers": "x", "sasl.password": f"${{file:{missing}}}"}), {})
    assert "clusters.src.sasl.password" in str(info.value) and str(missing) in str(info.value)


def test_an_empty_reference_is_refused() -> None:
    with pytest.raises(SecretError):
        resolve({"token": "${env:}"}, {})


def test_a_world_readable_secret_file_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    secret = _secret()
    file = tmp_path / "password"
    file.write_text(secret)
    os.chmod(file, 0o644)
    with caplog.at_level(logging.WARNING, logger="strait.secrets"):
        assert resolve({"sasl.password": f"${{file:{file}}}"}, {}) == {"sasl.password": secret}
    assert "readable by every user" in caplog.text and secret not in caplog.text


def test_values_of_secret_keys_are_masked_even_when_written_inline() -> None:
    inline = _secret()
    parse_config(_raw({"bootstrap.servers": "x", "sasl.password": inline}), {})
    assert redact(f"connecting with password {inline}!") == f"connecting with password {MASK}!"


def test_a_validation_error_never_quotes_a_secret() -> None:
    password = _secret()
    with pytest.raises(ConfigError) as info:
        # A list is refused for a client property; the error must not echo the password.
        parse_config(_raw({"bootstrap.servers": ["a", password], "sasl.password": password}), {})
    assert password not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_redact_props_masks_secret_keys_and_known_values() -> None:
    password = _secret()
    resolve({"sasl.password": password}, {})
    props = {"bootstrap.servers": "b:1", "sasl.password": password, "sasl.jaas.config": f"pw={password}"}
    assert redact_props(props) == {"bootstrap.servers": "b:1", "sasl.password": MASK, "sasl.jaas.config": f"pw={MASK}"}


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("sasl.password", True),
        ("ssl.key.password", True),
        ("api_token", True),
        ("sasl.oauthbearer.client.secret", True),
        ("sasl.username", False),
        ("bootstrap.servers", False),
        ("ssl.ca.location", False),
    ],
)
def test_secret_keys_are_known_by_name(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_the_log_filter_masks_messages_arguments_and_tracebacks() -> None:
    password = _secret()
    resolve({"sasl.password": password}, {})
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "auth with %s failed", (password,), None)
    assert RedactingFilter().filter(record)
    assert record.getMessage() == f"auth with {MASK} failed"
    try:
        raise RuntimeError(f"bad password {password}")
    except RuntimeError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    RedactingFilter().filter(record)
    assert record.exc_text is not None and password not in record.exc_text and MASK in record.exc_text


def test_short_values_are_not_treated_as_secrets() -> None:
    resolve({"sasl.password": "ab"}, {})
    assert redact("ab cab") == "ab cab"


def test_controller_tls_needs_existing_files(tmp_path: Path) -> None:
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError) as info:
        parse_config(_raw({"bootstrap.servers": "x"}, tls={"cert": str(cert), "key": str(key)}), {})
    assert "controller.tls" in str(info.value) and "k.pem" in str(info.value)
    key.write_text("y")
    config = parse_config(_raw({"bootstrap.servers": "x"}, tls={"cert": str(cert), "key": str(key)}), {})
    assert config.controller.url.startswith("https://")
    assert config.controller.tls is not None and config.controller.tls.client_verify() is True
