"""Reading the configuration again: a bad new file is refused with its error and the running
configuration stays; a rotated secret file is noticed without a signal; live librdkafka clients
take new credentials."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from strait import clients
from strait.config import StraitConfig, load_config
from strait.demo import wait_until
from strait.reload.plan import ReloadPlan
from strait.reload.reloader import Reloader

THIRD, FOURTH = f"third-{uuid.uuid4().hex}", f"fourth-{uuid.uuid4().hex}"
CONFIG = """
clusters:
  src:
    bootstrap.servers: 127.0.0.1:1
    security.protocol: SASL_PLAINTEXT
    sasl.mechanisms: SCRAM-SHA-512
    sasl.username: strait
    sasl.password: ${{file:{secret}}}
  dst:
    bootstrap.servers: 127.0.0.1:2
routes:
  - name: a
    source: src
    destination: dst
{extra}
"""


def _write(path: Path, secret: Path, extra: str = "") -> None:
    path.write_text(CONFIG.format(secret=secret, extra=extra))


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    secret = tmp_path / "password"
    # Unique: credentials rotated by one test are replaced in every client made later in the process.
    secret.write_text(f"first-{uuid.uuid4().hex}\n")
    secret.chmod(0o600)
    path = tmp_path / "strait.yaml"
    _write(path, secret)
    return path, secret


def _reloader(path: Path, applied: list[ReloadPlan], **kwargs: Any) -> Reloader:
    return Reloader(
        path=path,
        load=lambda: load_config(path, environ={}),
        running=load_config(path, environ={}),
        role="worker",
        apply=lambda plan, _running: applied.append(plan),
        **kwargs,
    )


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ("clusters: [unclosed", "invalid YAML"),
        ("clusters: {}\nroutes: []\n", "routes"),
        (
            None,
            "clusters.src.sasl.password: cannot read",
        ),  # what follows may be masked: other tests mask the value "secret"
        ("EXTRA", "routes.1.delivery"),
    ],
)
def test_a_bad_new_file_is_refused_with_its_error_and_the_running_configuration_stays(
    files: tuple[Path, Path], content: str | None, named: str, caplog: pytest.LogCaptureFixture
) -> None:
    path, secret = files
    applied: list[ReloadPlan] = []
    reloader = _reloader(path, applied)
    running = reloader.running
    if content is None:
        secret.unlink()
    elif content == "EXTRA":
        _write(path, secret, "  - {name: b, source: src, destination: dst, delivery: sometimes}")
    else:
        path.write_text(content)
    with caplog.at_level(logging.ERROR, logger="strait.reload.reloader"):
        assert reloader.reload("SIGHUP") is None
    assert reloader.running is running
    assert not applied
    message = "\n".join(record.getMessage() for record in caplog.records)
    assert "refused, the running configuration stays" in message and named in message, message


def test_a_rotated_secret_file_is_applied_without_a_signal(files: tuple[Path, Path]) -> None:
    path, secret = files
    applied: list[ReloadPlan] = []
    reloader = _reloader(path, applied, poll_interval_s=0.05)
    props = reloader.running.clusters["src"]
    client = clients.producer(props)
    reloader.start()
    try:
        second = f"second-{uuid.uuid4().hex}"
        secret.write_text(second + "\n")
        assert wait_until(lambda: props["sasl.password"] == second, 10)
    finally:
        reloader.stop()
        client.flush(0)
    # The same map the running clients were made from, now holding the new password.
    assert reloader.running.clusters["src"] is props
    assert applied and applied[-1].credentials == {"src": {"sasl.password": second}}


def test_an_added_route_reaches_the_process(files: tuple[Path, Path]) -> None:
    path, secret = files
    applied: list[ReloadPlan] = []
    reloader = _reloader(path, applied)
    _write(path, secret, "  - {name: b, source: dst, destination: src}")
    decided = reloader.reload("SIGHUP")
    assert decided is not None and decided.added == ("b",)
    assert [r.name for r in reloader.running.routes] == ["a", "b"]
    assert applied == [decided]


def test_live_clients_of_the_cluster_take_new_credentials(files: tuple[Path, Path]) -> None:
    config: StraitConfig = load_config(files[0], environ={})
    props = config.clusters["src"]
    copied = dict(props)  # as a component that copied the map when it started
    producer = clients.producer(props)
    admin = clients.admin(props)
    other = clients.producer({**props, "sasl.username": "someone-else"})
    try:
        assert clients.rotate_credentials(props, {"sasl.password": THIRD}) == 2
        assert props["sasl.password"] == THIRD
        # Made after the rotation from the stale copy: with the new credentials.
        late = clients.producer(copied)
        assert clients.kafka_python_options(copied)["sasl_plain_password"] == THIRD
        # A second rotation finds the three under the credentials now in force.
        assert clients.rotate_credentials(props, {"sasl.password": FOURTH}) == 3
        assert clients.kafka_python_options(copied)["sasl_plain_password"] == FOURTH
    finally:
        for client in (producer, other, late):
            client.flush(0)
        del admin
    with pytest.raises(KeyError, match="needs a restart"):
        clients.rotate_credentials(config.clusters["dst"], {"sasl.password": "x-password"})
