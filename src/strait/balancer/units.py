"""Byte quantities as people type them: `50KB`, `20MB`, `1.5GiB`, `1000`."""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "B": 1,
    "K": 1000,
    "KB": 1000,
    "M": 1000**2,
    "MB": 1000**2,
    "G": 1000**3,
    "GB": 1000**3,
    "T": 1000**4,
    "TB": 1000**4,
    "KIB": 1024,
    "MIB": 1024**2,
    "GIB": 1024**3,
    "TIB": 1024**4,
}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*(?:/S)?\s*$", re.IGNORECASE)


def parse_bytes(text: str) -> int:
    """Bytes in `text`; decimal units (KB = 1000) and binary ones (KiB = 1024). Raises ValueError."""
    match = _PATTERN.match(text.upper().replace("/S", ""))
    if not match or match.group(2).upper() not in _UNITS:
        raise ValueError(f"{text!r} is not a byte amount (examples: 50KB, 20MB, 1GiB, 1000)")
    value = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if value <= 0:
        raise ValueError(f"{text!r} must be more than zero bytes")
    return value


def human(n: float) -> str:
    """A short human-readable size (binary units)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
