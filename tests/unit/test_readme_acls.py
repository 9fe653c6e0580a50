"""The README's ACL tables are the ones Strait grants and tests (strait.security.acls)."""

from __future__ import annotations

from pathlib import Path

from strait.security import acls


def test_the_readme_lists_exactly_the_acls_of_each_role() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert acls.markdown().strip() in readme
