"""A failed start compared with the last good start of its launch (serve/memory.py), through `dsv4ctl diff`'s core.

`against_last_good` picks the good start (the newest of the same launch whose log is still the one it was), reads
both logs as `diff` does (`compare.read_start`, `compare.compare_reads`) and keeps the TOP ranked differences, each
with its lines. It claims no cause: each difference carries `diff`'s own `bearing` (how it bears on this start's
failure as its diagnosis states it). Nothing here prints; nothing here fails a serve: a comparison that cannot be
made is a note.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsv4ctl.compare import Comparison, Difference, compare_reads, read_start, value_of
from dsv4ctl.compare.spec import StartSpec
from dsv4ctl.errors import Dsv4ctlError
from dsv4ctl.serve.memory import GoodStart, Launch, last_good, memory_file

SCHEMA_VERSION = 1
TOP = 3  # the ranked differences serve names; `dsv4ctl diff GOOD BAD` lists them all


@dataclass
class LastGood:
    """What serve says of a failed start against the last good start of its launch: which start, the top differences
    (None: no comparison was made), and the notes (no good start remembered, logs skipped, a comparison not made)."""

    launch: Launch
    good: GoodStart | None = None
    differences: list[Difference] | None = None
    total: int = 0  # all the differences `diff` found
    notes: list[str] = field(default_factory=list)
    diff_command: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "launch": {"key": self.launch.key, **self.launch.fields},
            "good": self.good.to_json() if self.good else None,
            "differences": None if self.differences is None else [_difference(d) for d in self.differences],
            "differences_total": self.total,
            "notes": self.notes,
            "diff_command": self.diff_command,
        }


def _difference(d: Difference) -> dict[str, Any]:
    out = d.to_json()
    out["good_shown"], out["bad_shown"] = value_of(d, d.good), value_of(d, d.bad)
    return out


def against_last_good(launch: Launch, log_file: Path, memory: Path | None = None) -> LastGood:
    """This failed start (its log's last start) compared with the last good start of `launch` (memory: the file,
    default dsv4ctl's cache)."""
    path = memory if memory is not None else memory_file()
    good, notes = last_good(launch, log_file, path)
    result = LastGood(launch, good, notes=notes)
    if good is None:
        result.notes.append("no good start of this launch is remembered")
        return result
    try:
        c = compare_reads(read_start(StartSpec(good.log_file, good.log_file, None), "GOOD"),
                          read_start(StartSpec(str(log_file), str(log_file), None), "BAD"))
    except Dsv4ctlError as exc:
        result.notes.append(f"the last good start ({good.log_file}) could not be compared: {exc.message}")
        return result
    except Exception as exc:  # noqa: BLE001 - the comparison is an addition: it never hides the diagnosis
        result.notes.append(f"the last good start ({good.log_file}) could not be compared: {type(exc).__name__}: {exc}")
        return result
    return _kept(result, c, log_file)


def _kept(result: LastGood, c: Comparison, log_file: Path) -> LastGood:
    diffs = c.differences
    result.differences, result.total = diffs[:TOP], len(diffs)
    result.notes += c.notes
    assert result.good is not None
    result.diff_command = shlex.join(["dsv4ctl", "diff", str(result.good.log_file), str(log_file)])
    return result
