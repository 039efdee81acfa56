"""Parsing and formatting of sizes and token counts, shared by every command."""

from __future__ import annotations

import math
import re

from dsv4ctl.errors import UsageError

GiB = 1 << 30
MiB = 1 << 20

# vLLM's `human_readable_int` (utils/argparse_utils.py): one-letter suffixes, lower case decimal,
# upper case binary, no decimals with a binary suffix. `--kv-cache-memory-bytes 10G` is 10 GiB.
_VLLM_INT_RE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_VLLM_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_VLLM_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

# Spelled-out units as operators copy them from logs and nvidia-smi (`9.81GiB`, `64GB`, `512 MiB`).
_SIZE_RE = re.compile(r"([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)")
_SPELLED_UNITS = {
    "": 1, "b": 1,
    "kb": 1000, "kib": 1 << 10,
    "mb": 1000**2, "mib": 1 << 20,
    "gb": 1000**3, "gib": 1 << 30,
    "tb": 1000**4, "tib": 1 << 40,
}
_SIZE_HINT = "write it like 9.81GiB, 512MiB, 10G (= 10 GiB, as vLLM reads it) or 1234567"


def parse_vllm_int(text: str, *, what: str = "value", allow_auto: bool = False) -> int:
    """Read an integer exactly as vLLM's `human_readable_int[_or_auto]` does.

    `1k` = 1,000, `1K` = 1,024, `25.6k` = 25,600, `1M` = 1,048,576; with `allow_auto`, `auto` and
    `-1` give -1 (vLLM's `--max-model-len auto`).
    """
    value = str(text).strip()
    if allow_auto and (value == "-1" or value.lower() == "auto"):
        return -1
    match = _VLLM_INT_RE.fullmatch(value)
    if match:
        number, suffix = match.groups()
        if suffix in _VLLM_DECIMAL:
            return int(float(number) * _VLLM_DECIMAL[suffix])
        if "." in number:
            binary = int(float(number) * _VLLM_BINARY[suffix])
            raise UsageError(
                f"invalid {what} {text!r}: vLLM allows no decimals with binary suffixes like {suffix}",
                hint=f"write {binary} ({number} × {_VLLM_BINARY[suffix]:,}, binary) or {number}{suffix.lower()} "
                     f"({int(float(number) * _VLLM_DECIMAL[suffix.lower()]):,}, decimal)",
            )
        return int(number) * _VLLM_BINARY[suffix]
    try:
        return int(value)
    except ValueError:
        forms = "1048576, 1M, 512k" + (" or auto" if allow_auto else "")
        spelled = _SIZE_RE.fullmatch(value)
        if spelled and spelled.group(2) and spelled.group(2).lower() in _SPELLED_UNITS:  # 9.81GiB: the number it means, in vLLM's spelling
            exact = parse_size(value, what=what)
            raise UsageError(f"invalid {what} {text!r}: vLLM's parser takes no {spelled.group(2)!r} unit",
                             hint=f"{value} is {exact}: write {exact} (vLLM takes {forms})") from None
        raise UsageError(f"invalid {what} {text!r}", hint=f"write it like {forms}") from None


def parse_size(text: str, *, what: str = "size") -> int:
    """Parse a byte size: vLLM's spelling (`10G` = 10 GiB, `10g` = 10**9, as `--kv-cache-memory-bytes`
    reads it) or a spelled-out unit (`9.81GiB`, `512MiB`, `64GB`, `1.5e9`). Fractions round up."""
    value = str(text).strip()
    if _VLLM_INT_RE.fullmatch(value):
        return parse_vllm_int(value, what=what)
    match = _SIZE_RE.fullmatch(value)
    if not match:
        raise UsageError(f"invalid {what} {text!r}", hint=_SIZE_HINT)
    number, unit = match.groups()
    factor = _SPELLED_UNITS.get(unit.lower())
    if factor is None:
        raise UsageError(f"invalid {what} {text!r}: unknown unit {unit!r}", hint=_SIZE_HINT)
    if number.isdecimal():
        return int(number) * factor  # exact for integers of any size
    size = float(number) * factor
    if not math.isfinite(size):
        raise UsageError(f"invalid {what} {text!r}: must be a finite number of bytes")
    return math.ceil(size)


# A memory flag given as a bare number is bytes (as vLLM's --kv-cache-memory-bytes reads it); below
# this it is a forgotten unit (`--kv-cache-memory 9.81` meant 9.81 GiB, not 10 bytes).
MIN_BARE_MEMORY_BYTES = MiB


def parse_memory_flag(text: str, *, what: str) -> int:
    """`parse_size` for a memory flag: a bare number (no unit) below 1 MiB is refused, not read as bytes.

    `0` stays 0 (the caller says whether zero is allowed). The hint spells the likely meaning:
    `9.81` -> `did you mean 9.81GiB?`, `4096` -> `did you mean 4096MiB?`.
    """
    value = str(text).strip()
    size = parse_size(value, what=what)
    if 0 < size < MIN_BARE_MEMORY_BYTES and _SIZE_RE.fullmatch(value) and not _SIZE_RE.fullmatch(value).group(2):
        unit = "GiB" if float(value) < 1024 else "MiB"
        raise UsageError(
            f"{what} {value} has no unit: as bytes that is {size:,} bytes, less than 1 MiB",
            hint=f"did you mean {value}{unit}? (sizes: 9.81GiB, 512MiB, 64GB = 10^9 bytes, 10G = 10 GiB as vLLM reads it)",
        )
    return size


def describe_bytes(n_bytes: int) -> str:
    """`10,533,407,294 bytes (9.81 GiB, 10.53 GB)`: how a size flag was understood (GB and GiB differ by 7 %)."""
    return f"{n_bytes:,} bytes ({n_bytes / GiB:.2f} GiB, {n_bytes / 1000**3:.2f} GB)"


VLLM_BYTE_FLAGS = ("--kv-cache-memory-bytes",)


def check_vllm_memory_flags(argv: list[str]) -> list[tuple[str, int]]:
    """Check vLLM's byte-valued flags in a `vllm serve` argv the way `parse_memory_flag` does.

    Returns [(flag, bytes)] for the flags found (vLLM's own reading, `human_readable_int`); raises
    UsageError for a bare number below 1 MiB. Values vLLM itself rejects are left to vLLM's parser.
    """
    found: list[tuple[str, int]] = []
    for i, arg in enumerate(argv):
        for flag in VLLM_BYTE_FLAGS:
            if arg == flag and i + 1 < len(argv):
                raw = argv[i + 1]
            elif arg.startswith(flag + "="):
                raw = arg[len(flag) + 1:]
            else:
                continue
            try:
                size = parse_vllm_int(raw, what=flag)
            except UsageError:
                number = raw.strip()
                if re.fullmatch(r"\d+\.\d+", number):  # a size in GiB with its unit forgotten, most likely
                    gib_bytes = math.ceil(float(number) * GiB)
                    raise UsageError(
                        f"{flag} {number}: vLLM reads a whole number of bytes, or one with a suffix",
                        hint=f"{number} GiB is {flag} {gib_bytes} (decimals are not allowed with G); {number}g is "
                        f"{float(number) * 1e9:,.0f} bytes ({float(number) * 1e9 / GiB:.2f} GiB), as vLLM reads it",
                    ) from None
                continue  # vLLM's parser words its own refusal
            if 0 < size < MIN_BARE_MEMORY_BYTES and re.fullmatch(r"\d+", raw.strip()):
                suffix = "G" if size < 1024 else "M"
                raise UsageError(
                    f"{flag} {raw.strip()} is {size:,} bytes, less than 1 MiB: a unit is missing",
                    hint=f"did you mean {flag} {raw.strip()}{suffix}? (vLLM reads 10G as 10 GiB, 10g as 10^9 bytes)",
                )
            found.append((flag, size))
    return found


def gib(n_bytes: float) -> float:
    return n_bytes / GiB


def format_gib_vllm(n_bytes: float) -> str:
    """vLLM's own `format_gib`: `round(bytes / GiB, 2)` with no trailing zeros (`9.81`, `61.2`)."""
    return f"{round(n_bytes / GiB, 2)}"


def format_gib(n_bytes: float, digits: int = 2) -> str:
    """`10.06 GiB`: the unit vLLM logs memory in."""
    return f"{n_bytes / GiB:.{digits}f} GiB"


def format_tokens(n: int) -> str:
    """`1,048,576`: token counts with thousands separators, as vLLM logs them."""
    return f"{n:,}"


def read_number(text: object) -> float | None:
    """A number as a message writes it ('1,024', '0.92', '3e9'); None when the text is not one."""
    try:
        return float(str(text).replace(",", ""))
    except (TypeError, ValueError):
        return None


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return cdiv(a, b) * b
