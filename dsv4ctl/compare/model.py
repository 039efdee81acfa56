"""What `dsv4ctl diff` says: the result dataclasses and their `--json` form (docs/diff.md, JSON).

`Comparison.to_json()` is the contract (`schema_version` is added by `render.emit_json`). Nothing here reads a log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.diagnosis.model import Diagnosis

NOT_IN_LOG = "not in log"
# An argument absent from a `non-default args` line that the log has: vLLM ran it at its default.
DEFAULT = "default (not among the non-default args)"


@dataclass(frozen=True)
class Seen:
    """One fact as one start's log shows it: its value as text, the line it rests on (file and 1-based number)."""

    value: str
    source: str | None = None
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "line": self.line}


@dataclass(frozen=True)
class PhaseMark:
    """The first line of a phase in a start: its number, its own time (`MM-DD HH:MM:SS`, None when the line has
    none) and its seconds, the seconds until the next phase began (None for the last, or without times)."""

    phase: str
    line: int
    time: str | None
    seconds: int | None
    duration_s: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "line": self.line, "time": self.time, "duration_s": self.duration_s}


@dataclass
class StartRead:
    """One side of the comparison: which start of which log, its diagnosis (advised), the phases it reached with
    their lines and times, and what only a line-by-line look shows (environment, `dsv4ctl fixes:`, torch/CUDA)."""

    label: str  # "GOOD" | "BAD"
    spec: str  # as given: LOG, LOG#2, -
    source: str
    number: int  # 1-based, as diagnose's starts table numbers it
    count: int  # starts in the log
    first_line: int | None
    last_line: int | None
    diagnosis: Diagnosis
    phases: list[PhaseMark] = field(default_factory=list)
    env: dict[str, Seen] = field(default_factory=dict)
    fixes: list[Seen] = field(default_factory=list)
    runtime: dict[str, Seen] = field(default_factory=dict)  # torch, cuda, driver as logged

    @property
    def verdict(self) -> str:
        return self.diagnosis.verdict

    def to_json(self) -> dict[str, Any]:
        d = self.diagnosis
        rc = d.root_cause
        return {
            "label": self.label, "spec": self.spec, "source": self.source, "start": self.number, "starts": self.count,
            "first_line": self.first_line, "last_line": self.last_line, "verdict": d.verdict, "phase": d.phase,
            "summary": d.summary, "root_cause": rc.id if rc else None, "root_cause_line": rc.line if rc else None,
            "exit_code": int(d.exit_code), "phases": [p.to_json() for p in self.phases],
        }


@dataclass
class Difference:
    """One fact of the pair: GOOD's and BAD's value (None: not in that log), how they relate, and, for a difference,
    its place in the ranking and why it bears on BAD's failure."""

    name: str
    category: str  # length | memory | release | parallel | args | env | model
    status: str  # same | changed | added | removed | only in GOOD's log | only in BAD's log
    good: Seen | None
    bad: Seen | None
    rank: int | None = None
    bearing: str | None = None

    @property
    def differs(self) -> bool:
        return self.status != "same"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "category": self.category, "status": self.status, "rank": self.rank,
            "good": self.good.to_json() if self.good else None, "bad": self.bad.to_json() if self.bad else None,
            "bearing": self.bearing,
        }


@dataclass(frozen=True)
class Parting:
    """Where the two timelines part: the last phase BAD's log marks before it failed or ended, and what GOOD did there."""

    phase: str | None
    text: str
    good_line: int | None = None
    bad_line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"phase": self.phase, "text": self.text, "good_line": self.good_line, "bad_line": self.bad_line}


@dataclass(frozen=True)
class PairAnswer:
    """A checklist question answered across the pair: yes / no / not shown, with why."""

    question: str
    answer: str
    note: str

    def to_json(self) -> dict[str, Any]:
        return {"question": self.question, "answer": self.answer, "note": self.note}


@dataclass
class Comparison:
    """GOOD and BAD aligned: every fact, the differences ranked by how they bear on BAD's failure, the phases side by
    side and where they part, the explicit-length question answered across the pair, and the length to pin."""

    good: StartRead
    bad: StartRead
    facts: list[Difference]
    parting: Parting
    explicit_length: PairAnswer
    headline: str
    pin_length: int | None = None  # the explicit --max-model-len advice plans for BAD (stale length only)
    notes: list[str] = field(default_factory=list)

    @property
    def differences(self) -> list[Difference]:
        return sorted((f for f in self.facts if f.differs), key=lambda f: f.rank or 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "headline": self.headline,
            "good": self.good.to_json(),
            "bad": self.bad.to_json(),
            "differences": [f.to_json() for f in self.differences],
            "same": [f.to_json() for f in self.facts if not f.differs],
            "parting": self.parting.to_json(),
            "explicit_length": self.explicit_length.to_json(),
            "pin_max_model_len": self.pin_length,
            "notes": self.notes,
        }
