"""scripts/vendor_ui.py: Chart.js comes from the pinned npm tarball only if its integrity hash matches."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import json
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "vendor_ui.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vendor_ui", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


vendor_ui = _load()


def _tarball(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def test_the_pin_is_a_sha512_integrity_for_a_registry_tarball_of_its_version() -> None:
    pin = json.loads(vendor_ui.LOCK.read_text())
    assert pin["package"] == "chart.js"
    assert pin["tarball"] == f"https://registry.npmjs.org/chart.js/-/chart.js-{pin['version']}.tgz"
    assert pin["integrity"].startswith("sha512-")
    assert len(base64.b64decode(pin["integrity"].removeprefix("sha512-"))) == 64


def test_check_integrity_accepts_the_right_bytes_and_refuses_others() -> None:
    vendor_ui.check_integrity(b"chart", _integrity(b"chart"))
    with pytest.raises(SystemExit, match="refusing"):
        vendor_ui.check_integrity(b"chart!", _integrity(b"chart"))
    with pytest.raises(SystemExit, match="unsupported"):
        vendor_ui.check_integrity(b"chart", "md5-abc")


def _pin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tarball: bytes, integrity: str) -> list[str]:
    lock = tmp_path / "vendor_ui.lock.json"
    lock.write_text(json.dumps({"package": "chart.js", "version": "9.9.9", "tarball": "u", "integrity": integrity}))
    monkeypatch.setattr(vendor_ui, "LOCK", lock)
    fetched: list[str] = []

    def get(url: str, attempts: int = 4) -> bytes:
        fetched.append(url)
        return tarball

    monkeypatch.setattr(vendor_ui, "_get", get)
    return fetched


def test_vendor_extracts_the_umd_build_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tarball = _tarball({"package/dist/chart.umd.js": b"umd", "package/LICENSE.md": b"MIT"})
    fetched = _pin(tmp_path, monkeypatch, tarball, _integrity(tarball))
    target = tmp_path / "vendor"
    vendor_ui.vendor(target, force=False)
    assert (target / "chart.umd.js").read_bytes() == b"umd"
    assert (target / "chart.js.LICENSE.md").read_bytes() == b"MIT"
    vendor_ui.vendor(target, force=False)
    assert fetched == ["u"]


def test_a_tampered_tarball_vendors_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tarball = _tarball({"package/dist/chart.umd.js": b"evil", "package/LICENSE.md": b"MIT"})
    _pin(tmp_path, monkeypatch, tarball, _integrity(b"the real tarball"))
    with pytest.raises(SystemExit, match="refusing"):
        vendor_ui.vendor(tmp_path / "vendor", force=False)
    assert not (tmp_path / "vendor").exists()
