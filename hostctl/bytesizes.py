"""Byte sizes as people write them in profiles ("129GiB", "34g", "4TB") and as Docker wants them.

Docker's suffixes are binary (34g = 34 GiB), so a bare k/m/g/t and the KiB..TiB forms are
binary here too; only the explicit decimal forms KB/MB/GB/TB are powers of 1000.
"""

from __future__ import annotations

import re

KIB = 1024
MIB = KIB**2
GIB = KIB**3
TIB = KIB**4

_BINARY = {"": 1, "b": 1, "k": KIB, "kib": KIB, "m": MIB, "mib": MIB, "g": GIB, "gib": GIB, "t": TIB, "tib": TIB}
_DECIMAL = {"kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
# Bounded digits: "999...9GiB" with 400 digits is float inf, and int(inf) raises OverflowError
# (no caller's ValueError); 20 digits hold every size in bytes there is.
_SIZE_RE = re.compile(r"^\s*(\d{1,20}(?:\.\d{1,20})?)\s*([a-zA-Z]{0,8})\s*$")


def parse_size(value: int | str) -> int:
    """Return a size in bytes; raise ValueError naming the accepted forms."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as '129GiB', '34g' or a number of bytes, got a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"expected a non-negative size, got {value}")
        return value
    m = _SIZE_RE.match(str(value))
    if not m:
        raise ValueError(f"expected a size such as '129GiB', '34g' or '4TB', got {value!r}")
    number, suffix = float(m.group(1)), m.group(2).lower()
    factor = _BINARY.get(suffix) or _DECIMAL.get(suffix)
    if factor is None:
        raise ValueError(f"unknown size unit {m.group(2)!r} in {value!r}; use KiB/MiB/GiB/TiB (or k/m/g/t) or KB/MB/GB/TB")
    return int(number * factor)


def docker_size(n_bytes: int) -> str:
    """The shortest exact Docker form: 34g, 700m, or bytes."""
    for suffix, factor in (("g", GIB), ("m", MIB), ("k", KIB)):
        if n_bytes % factor == 0 and n_bytes >= factor:
            return f"{n_bytes // factor}{suffix}"
    return str(n_bytes)


def fmt_bytes(n_bytes: int | float) -> str:
    """A size in the largest binary unit that keeps it at 1 or more (for small limits such as memlock)."""
    for unit, factor in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n_bytes >= factor:
            value = n_bytes / factor
            return f"{value:.0f} {unit}" if abs(value - round(value)) < 0.05 else f"{value:.1f} {unit}"
    return f"{int(n_bytes)} B"


def fmt_gib(n_bytes: int | float) -> str:
    value = n_bytes / GIB
    return f"{value:.0f} GiB" if abs(value - round(value)) < 0.05 else f"{value:.1f} GiB"
