"""Parsing and formatting of sizes and token counts, shared by every command."""

from __future__ import annotations

import math
import re

from dsv4ctl.errors import UsageError

GiB = 1 << 30
MiB = 1 << 20

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*$")
# Binary units as operators write them for GPU memory; decimal ones as vLLM's human-readable ints read them.
_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1 << 10,
    "m": 1000**2, "mb": 1000**2, "mib": 1 << 20,
    "g": 1000**3, "gb": 1000**3, "gib": 1 << 30,
    "t": 1000**4, "tb": 1000**4, "tib": 1 << 40,
}


def parse_size(text: str, *, what: str = "size") -> int:
    """Parse `9.81GiB`, `64M`, `1.5e9` or `123456` into bytes (GiB/MiB binary, G/GB/M/MB decimal).

    vLLM's `--kv-cache-memory-bytes` reads `K`/`M`/`G` as decimal; we follow the same reading and
    accept the explicit binary suffixes operators use when they copy a GiB figure from a log.
    """
    match = _SIZE_RE.match(str(text))
    if not match:
        raise UsageError(f"invalid {what} {text!r}", hint="write it like 9.81GiB, 512MiB, 64M or 1234567")
    number, unit = match.groups()
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise UsageError(f"invalid {what} {text!r}: unknown unit {unit!r}", hint="units: B, KiB, MiB, GiB, TiB, K, M, G, T")
    if number.isdigit():
        value = int(number) * factor  # exact for integers of any size
        return value
    value = float(number) * factor
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"invalid {what} {text!r}: must be a non-negative number of bytes")
    return int(math.ceil(value)) if unit.lower() not in ("", "b") else int(value)


def gib(n_bytes: float) -> float:
    return n_bytes / GiB


def format_gib(n_bytes: float, digits: int = 2) -> str:
    """`10.06 GiB`: the unit vLLM logs memory in."""
    return f"{n_bytes / GiB:.{digits}f} GiB"


def format_tokens(n: int) -> str:
    """`1,048,576`: token counts with thousands separators, as vLLM logs them."""
    return f"{n:,}"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return cdiv(a, b) * b
