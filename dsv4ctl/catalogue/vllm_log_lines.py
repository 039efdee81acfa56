"""Which startup lines each vLLM release prints: the generated `vllm_log_lines.json`.

For every line the startup timeline reads (a key of `dsv4ctl.logs.timeline.line_patterns()`: "available_kv", "v2_runner",
...), each known release's format string for it and where it is printed, or None when that release's sources
hold no string the line's regex matches (the line is gone, or not yet there). Built from the releases' wheels by
`scripts/add_release.py` (`--log-lines` rebuilds it for every release); lines no release prints (uvicorn's,
Python's) are not in it.

    line("v2_runner", "0.34.0")   -> None             (vLLM 0.34.0 has no V1 runner to fall back from)
    line("v2_runner", "0.33.0")   -> LogLine("Using V2 Model Runner", "vllm/v1/worker/gpu_worker.py:513")
    prints("v2_runner", "0.34.0") -> False; None when the release or the line is not in the file
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dsv4ctl.catalogue.data_file import LazyData

DATA = Path(__file__).with_name("vllm_log_lines.json")
SCHEMA = 1


@dataclass(frozen=True)
class LogLine:
    text: str  # the format string as vLLM's source writes it (a logger's %-style string)
    where: str  # 'vllm/v1/worker/gpu_worker.py:795' in that release

    def cite(self, release: str) -> str:
        return f"vllm=={release} {self.where}"


class SchemaError(ValueError):
    """The file is JSON but not this schema (another schema_version, or no `releases` table)."""


def read_file(path: Path) -> dict:
    """The file's document, checked: OSError when unreadable, ValueError when not JSON, SchemaError when not this
    schema. The upgrade view reads a file given to it through this too."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA or not isinstance(data.get("releases"), dict):
        found = data.get("schema_version") if isinstance(data, dict) else None
        raise SchemaError(f"schema_version {found!r}, expected {SCHEMA}")
    return data


_DATA = LazyData(DATA, read_file)


def reset(path: str | Path | None = None) -> None:
    """Forget the loaded file; the next call reads `path` (default: the packaged file)."""
    _DATA.reset(path)


def load_error() -> str | None:
    _DATA.get()
    return _DATA.error


def releases() -> tuple[str, ...]:
    """The releases in the file, oldest first."""
    data = _DATA.get()
    return tuple(sorted(data["releases"], key=_version_key)) if data else ()


def _version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdecimal() else -1 for x in v.split("."))


def keys() -> tuple[str, ...]:
    """The timeline lines some known release prints."""
    data = _DATA.get()
    return tuple(sorted({k for per in data["releases"].values() for k in per})) if data else ()


def line(key: str, release: str) -> LogLine | None:
    """The release's format string for a timeline line; None when it does not print it or is not known."""
    data = _DATA.get()
    entry = (data["releases"].get(release) or {}).get(key) if data else None
    return LogLine(entry["text"], entry["where"]) if entry else None


def prints(key: str, release: str) -> bool | None:
    """Whether the release prints the line: True/False, None when the file does not know the release or the line."""
    data = _DATA.get()
    per = data["releases"].get(release) if data else None
    if per is None or key not in per:
        return None
    return per[key] is not None
