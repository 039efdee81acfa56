"""The startup lines the timeline reads, per vLLM release, from the catalogue's `vllm_log_lines.json`:

    {"schema_version": 1,
     "releases": {"0.33.0": {"<timeline line key>": {"text": "<format string>", "where": "vllm/...py:N"} | null}}}

A key whose entry is null is a line that release does not print. Between two releases a line is gone (printed by
one, null in the other) or reworded (its format string differs): a scraper, or a grep in a runbook, written for one
misses it in the other. A release or a key the file lacks is not recorded, and said so; so is a missing file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsv4ctl.catalogue import vllm_log_lines

DATA = vllm_log_lines.DATA
SCHEMA_VERSION = vllm_log_lines.SCHEMA

GONE = "gone"
REWORDED = "reworded"
NEW = "new"


@dataclass(frozen=True)
class LineChange:
    key: str  # the timeline's name for the line
    change: str  # GONE | REWORDED | NEW
    before: str | None  # the format string under the release compared from (None: not printed)
    before_where: str | None
    after: str | None
    after_where: str | None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "change": self.change, "before": self.before, "before_where": self.before_where,
                "after": self.after, "after_where": self.after_where}


@dataclass(frozen=True)
class LogLinesDiff:
    recorded: bool
    note: str | None
    changes: tuple[LineChange, ...]  # gone and reworded first: the lines a scraper misses
    unrecorded_keys: tuple[str, ...]  # keys one release records and the other does not

    @property
    def missed(self) -> tuple[LineChange, ...]:
        return tuple(c for c in self.changes if c.change in (GONE, REWORDED))

    def to_json(self) -> dict[str, Any]:
        return {"recorded": self.recorded, "note": self.note, "changes": [c.to_json() for c in self.changes],
                "unrecorded_keys": list(self.unrecorded_keys)}


def read_table(path: str | Path | None = None) -> tuple[dict[str, dict[str, Any]] | None, str | None]:
    """(the releases' lines, None) or (None, why not): a missing, unreadable or foreign file is not recorded."""
    p = Path(path) if path is not None else DATA
    try:
        data = vllm_log_lines.read_file(p)
    except FileNotFoundError:
        return None, f"not recorded: no table of vLLM's log lines ({p.name})"
    except vllm_log_lines.SchemaError:
        return None, f"not recorded: {p.name} is not schema_version {SCHEMA_VERSION}"
    except (OSError, ValueError) as exc:
        return None, f"not recorded: {p.name} is unreadable ({type(exc).__name__})"
    return {str(r): lines for r, lines in data["releases"].items() if isinstance(lines, dict)}, None


def _entry(value: Any) -> tuple[str | None, str | None]:
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return value["text"], value.get("where") if isinstance(value.get("where"), str) else None
    return None, None


def log_lines_diff(a: str, b: str, path: str | Path | None = None) -> LogLinesDiff:
    """The timeline's lines from release `a` to `b`."""
    table, why = read_table(path)
    if table is None:
        return LogLinesDiff(False, why, (), ())
    missing = [r for r in (a, b) if r not in table]
    if missing:
        have = ", ".join(sorted(table)) or "none"
        return LogLinesDiff(False, f"not recorded: the table of log lines has no vLLM {' or '.join(missing)} "
                            f"(it has {have})", (), ())
    before, after = table[a], table[b]
    changes = []
    for key in sorted(set(before) & set(after)):
        (old, old_where), (new, new_where) = _entry(before[key]), _entry(after[key])
        if old is not None and new is None:
            changes.append(LineChange(key, GONE, old, old_where, None, None))
        elif old is None and new is not None:
            changes.append(LineChange(key, NEW, None, None, new, new_where))
        elif old is not None and old != new:
            changes.append(LineChange(key, REWORDED, old, old_where, new, new_where))
    order = {GONE: 0, REWORDED: 1, NEW: 2}
    changes.sort(key=lambda c: (order[c.change], c.key))
    return LogLinesDiff(True, None, tuple(changes), tuple(sorted(set(before) ^ set(after))))
