"""The tools that check Strait's deployment files, built or fetched from package registries only.

- ``helm``, built from the Go module proxy with this machine's Go (``go install``);
- ``kubeconform``, built the same way;
- the Kubernetes JSON schemas kubeconform validates against, taken from the ``kubernetes-validate``
  wheel on PyPI (it ships them for every Kubernetes minor release it supports), refused unless
  the wheel's SHA-256 is the pinned one.

Everything lands in ``~/.cache/strait/tools`` (``$STRAIT_CACHE/tools`` when set), outside git; a
tool already there is used as it is, so only the first run builds (about three minutes for helm on
two cores). Standard library only.

    python scripts/deploy_tools.py            make sure all are there; print their paths as JSON
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HELM_MODULE = "helm.sh/helm/v4"
HELM_VERSION = "v4.3.2"
KUBECONFORM_MODULE = "github.com/yannh/kubeconform"
KUBECONFORM_VERSION = "v0.8.0"
SCHEMAS_PACKAGE = "kubernetes-validate"
SCHEMAS_VERSION = "1.37.0"
SCHEMAS_SHA256 = "85136d018a27b50ec7fc049d902bfa5193f5976807e6c0f408e3ab6fe078cad9"
# The Kubernetes releases the chart is validated against: the oldest and the newest the package has
# that the chart claims (Chart.yaml's kubeVersion).
KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")


class ToolError(RuntimeError):
    """A tool could not be built or fetched; the message says which and why."""


def cache_dir() -> Path:
    base = Path(os.environ.get("STRAIT_CACHE", Path.home() / ".cache" / "strait"))
    return base / "tools"


def find_go() -> str:
    """This machine's ``go``: on the PATH, else the usual /usr/local/go."""
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").is_file() else None)
    if found is None:
        raise ToolError("no Go toolchain (go on the PATH, or /usr/local/go/bin/go) to build helm and kubeconform")
    return found


def _go_install(package: str, version: str, binary: str, ldflags: str = "") -> Path:
    target = cache_dir() / "bin" / f"{binary}-{version}"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as gobin:
        env = {**os.environ, "GOBIN": gobin, "GOFLAGS": f"{os.environ.get('GOFLAGS', '')} -trimpath".strip()}
        command = ["nice", "-n", "10", find_go(), "install"]
        if ldflags:
            command += ["-ldflags", ldflags]
        command.append(f"{package}@{version}")
        # A temporary working folder: go install must not see a go.mod of the caller's.
        done = subprocess.run(command, env=env, cwd=gobin, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ToolError(f"go install {package}@{version} failed:\n{done.stderr[-4000:]}")
        os.replace(Path(gobin) / binary, target)
    return target


def helm() -> Path:
    return _go_install(
        f"{HELM_MODULE}/cmd/helm",
        HELM_VERSION,
        "helm",
        ldflags=f"-X {HELM_MODULE}/internal/version.version={HELM_VERSION}",
    )


def kubeconform() -> Path:
    return _go_install(
        f"{KUBECONFORM_MODULE}/cmd/kubeconform",
        KUBECONFORM_VERSION,
        "kubeconform",
        ldflags=f"-X main.version={KUBECONFORM_VERSION}",
    )


def schemas() -> Path:
    """The folder holding ``v<version>-local-strict/`` schema folders for KUBERNETES_VERSIONS."""
    target = cache_dir() / f"kubernetes-json-schema-{SCHEMAS_VERSION}"
    wanted = [f"v{v}-local-strict" for v in KUBERNETES_VERSIONS]
    if all((target / name / "all.json").is_file() for name in wanted):
        return target
    with tempfile.TemporaryDirectory() as download:
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        done = subprocess.run(
            [*pip, "--dest", download, f"{SCHEMAS_PACKAGE}=={SCHEMAS_VERSION}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ToolError(f"pip download {SCHEMAS_PACKAGE}=={SCHEMAS_VERSION} failed:\n{done.stderr[-4000:]}")
        (wheel,) = Path(download).glob("*.whl")
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != SCHEMAS_SHA256:
            raise ToolError(f"{wheel.name} has SHA-256 {digest}, the pin is {SCHEMAS_SHA256}: refusing it")
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target.parent))
        prefix = "kubernetes_validate/kubernetes-json-schema/"
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if not member.startswith(prefix) or member.endswith("/"):
                    continue
                relative = member[len(prefix) :]
                if relative.split("/", 1)[0] not in wanted:
                    continue
                out = staging / relative
                out.parent.mkdir(parents=True, exist_ok=True)
                # The package resolves "/api/_definitions.json" (against each schema's https $id)
                # itself; kubeconform is pointed at the definitions file beside each schema.
                definitions = (target / relative.split("/", 1)[0] / "_definitions.json").as_uri()
                text = archive.read(member).replace(b'"/api/_definitions.json#', f'"{definitions}#'.encode())
                out.write_bytes(text)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    return target


def ensure() -> dict[str, str]:
    """Every tool, built or fetched when missing; their paths."""
    return {
        "helm": str(helm()),
        "kubeconform": str(kubeconform()),
        "schemas": str(schemas()),
        "kubernetes_versions": ",".join(KUBERNETES_VERSIONS),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.parse_args(argv)
    try:
        print(json.dumps(ensure(), indent=2))
    except ToolError as exc:
        print(f"deploy_tools: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
