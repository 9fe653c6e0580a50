"""A delayed link to a cluster: Toxiproxy in front of each broker's proxied listener.

The sandbox gives a proxied cluster's brokers a second listener advertised at a proxy port
(``SandboxSpec.proxied``); clients bootstrapped at those ports learn only proxy addresses from
metadata, so every connection they open crosses the link. Toxiproxy listens on each proxy port
and forwards to the broker; a round trip of ``D`` ms is set as two ``latency`` toxics, ``D/2``
on the way to the broker (upstream) and ``D/2`` on the way back (downstream).

What it models: every request waits a round trip for its response, however many are in
flight (Toxiproxy timestamps each chunk as it reads it and holds up to 1,024 chunks per
direction). What it does not: the TCP window on a real long link, since each TCP connection
here stays on loopback with the proxy buffering between them; the kernel's netem, which
would model that, is not available in every container (it is a kernel module).

Toxiproxy is a Go program: ``toxiproxy-server`` on ``PATH`` is used, else the pinned version is
built once with ``go install`` into the cache (``STRAIT_CACHE``, as the sandbox's jars).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from strait.sandbox import artifacts, ports

MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
VERSION = "v2.12.0"
TOOL = f"Toxiproxy {VERSION}"


class LinkError(RuntimeError):
    """Toxiproxy could not be built, started or configured; the message says why."""


def binary() -> Path:
    """``toxiproxy-server``: from ``PATH``, from the cache, or built into the cache with Go."""
    found = shutil.which("toxiproxy-server")
    if found:
        return Path(found)
    target = artifacts.cache_root() / "toxiproxy" / VERSION
    built = target / "server"
    if built.exists():
        return built
    go = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if go is None:
        raise LinkError("toxiproxy-server is not on PATH and Go is not installed to build it")
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [go, "install", f"{MODULE}@{VERSION}"],
        env={**os.environ, "GOBIN": str(target)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0 or not built.exists():
        raise LinkError(f"go install {MODULE}@{VERSION} failed: {done.stderr.strip()[-2000:]}")
    return built


def proxies(upstreams: Sequence[tuple[int, int]], *, prefix: str = "broker") -> list[dict[str, Any]]:
    """Toxiproxy's start-up configuration: one proxy per ``(proxy port, broker port)``."""
    return [
        {
            "name": f"{prefix}-{n}",
            "listen": f"127.0.0.1:{listen}",
            "upstream": f"127.0.0.1:{upstream}",
            "enabled": True,
        }
        for n, (listen, upstream) in enumerate(upstreams, start=1)
    ]


def latency_toxics(rtt_ms: int) -> list[dict[str, Any]]:
    """The toxics that add ``rtt_ms`` to a round trip: half on each way (the odd millisecond on
    the way back); none for 0."""
    if rtt_ms < 0:
        raise ValueError(f"a delay is 0 ms or more, not {rtt_ms}")
    if rtt_ms == 0:
        return []
    up = rtt_ms // 2
    return [
        {"name": "rtt-upstream", "type": "latency", "stream": "upstream", "toxicity": 1.0,
         "attributes": {"latency": up, "jitter": 0}},
        {"name": "rtt-downstream", "type": "latency", "stream": "downstream", "toxicity": 1.0,
         "attributes": {"latency": rtt_ms - up, "jitter": 0}},
    ]  # fmt: skip


class DelayedLink:
    """A running Toxiproxy with one proxy per broker of a proxied cluster; always ``stop()`` it."""

    def __init__(self, upstreams: Sequence[tuple[int, int]], workdir: Path) -> None:
        """``upstreams``: ``(proxy port, broker's proxied port)`` per broker."""
        self._proxies = proxies(upstreams)
        self._workdir = workdir.resolve()
        self._api = ports.free_port()
        self._child: subprocess.Popen[bytes] | None = None
        self.rtt_ms = 0

    def start(self, timeout_s: float = 30.0) -> None:
        server = binary()
        self._workdir.mkdir(parents=True, exist_ok=True)
        config = self._workdir / "toxiproxy.json"
        config.write_text(json.dumps(self._proxies, indent=1))
        log = open(self._workdir / "toxiproxy.log", "ab")  # noqa: SIM115 - the child holds it; closed below
        try:
            child = subprocess.Popen(
                [str(server), "-host", "127.0.0.1", "-port", str(self._api), "-config", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Its default level logs every connection's links at trace level.
                env={**os.environ, "LOG_LEVEL": "info"},
            )
        finally:
            log.close()
        self._child = child
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                listed = self._call("GET", "/proxies")
                if len(listed) == len(self._proxies):
                    return
            except (LinkError, OSError):
                pass
            if child.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise LinkError(f"Toxiproxy did not serve its proxies; see {self._workdir / 'toxiproxy.log'}")
            time.sleep(0.2)

    def set_delay(self, rtt_ms: int) -> None:
        """Replace the toxics of every proxy so a round trip through the link takes ``rtt_ms`` more."""
        wanted = latency_toxics(rtt_ms)
        for proxy in self._proxies:
            for toxic in self._call("GET", f"/proxies/{proxy['name']}/toxics"):
                self._call("DELETE", f"/proxies/{proxy['name']}/toxics/{toxic['name']}")
            for toxic in wanted:
                self._call("POST", f"/proxies/{proxy['name']}/toxics", toxic)
        self.rtt_ms = rtt_ms

    def pids(self) -> list[int]:
        return [self._child.pid] if self._child is not None and self._child.poll() is None else []

    def describe(self) -> dict[str, object]:
        return {
            "tool": TOOL,
            "proxies": len(self._proxies),
            "split": "half the round trip on each way (latency toxics upstream and downstream)",
        }

    def stop(self) -> None:
        """Stop Toxiproxy (the process this link started, by its pid), and with it every delay."""
        child, self._child = self._child, None
        if child is None:
            return
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self._api}{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            raise LinkError(f"Toxiproxy {method} {path}: HTTP {exc.code} {exc.read()[:500]!r}") from None
        if not text:
            return None
        parsed = json.loads(text)
        # GET /proxies answers a mapping of name to proxy; a list elsewhere.
        return list(parsed.values()) if isinstance(parsed, dict) and path == "/proxies" else parsed
