"""Byte quantities as people type them: `50KB`, `20MB`, `1.5GiB`, `1000`."""

from __future__ import annotations

from pydantic import ByteSize, TypeAdapter, ValidationError

# pydantic's ByteSize does the parsing: decimal units (K, KB = 1000) and binary ones (KiB = 1024),
# fractions, any case, optional space. A throttle may be written as a rate (`20MB/s`).
_BYTES = TypeAdapter(ByteSize)


def parse_bytes(text: str) -> int:
    """Bytes in `text`; decimal units (KB = 1000) and binary ones (KiB = 1024). Raises ValueError."""
    amount = text.strip()
    if amount[-2:].lower() == "/s":
        amount = amount[:-2]
    try:
        value = int(_BYTES.validate_python(amount.strip()))
    except ValidationError:
        raise ValueError(f"{text!r} is not a byte amount (examples: 50KB, 20MB, 1GiB, 1000)") from None
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
