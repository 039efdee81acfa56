"""What a diagnosis says: the result dataclasses and their `--json` form (docs/diagnose.md, JSON).

`Diagnosis.to_json()` is the contract (`schema_version` is added by `render.emit_json`); `Diagnosis.summary` is
its one line. Nothing here reads a log.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.errors import ExitCode
from dsv4ctl.logs.timeline import StartupTimeline

VERDICT_EXIT = {
    "healthy": ExitCode.OK,
    "inconclusive": ExitCode.INCONCLUSIVE,
    "stuck": ExitCode.STUCK,
}

MAX_EVIDENCE = 6

@dataclass(frozen=True)
class Evidence:
    """A quoted log line: its source, 1-based line number, message text (the wrappers peeled off) and process
    tag, and `raw`, the line as it stands in the log (`reader.printable`)."""

    source: str
    line: int
    text: str
    process: str | None = None
    raw: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "line": self.line, "text": self.text, "process": self.process, "raw": self.raw}

@dataclass
class Finding:
    """One signature found in the log, with the lines that show it and what to do."""

    id: str
    severity: str
    title: str
    meaning: str
    evidence: list[Evidence]
    details: dict[str, Any] = field(default_factory=dict)
    actions: list[str] = field(default_factory=list)
    is_root_cause: bool = False
    role: str = "cause"
    tier: int = 0
    order: tuple = ()

    @property
    def line(self) -> int | None:
        return self.evidence[0].line if self.evidence else None

    def to_json(self) -> dict[str, Any]:
        first = self.evidence[0] if self.evidence else None
        return {
            "id": self.id,
            "severity": self.severity,
            "title": self.title,
            "line": first.line if first else None,
            "source": first.source if first else None,
            "evidence": first.text if first else None,
            "evidence_lines": [e.to_json() for e in self.evidence],
            "meaning": self.meaning,
            "details": {k: v for k, v in self.details.items() if not k.startswith("_")},
            "actions": self.actions,
            "role": self.role,
            "is_root_cause": self.is_root_cause,
        }

@dataclass
class ChecklistItem:
    """One question of the stale-max_model_len checklist, answered from the log."""

    question: str
    answer: str  # "yes" | "no" | "not in log"
    evidence: Evidence | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "answer": self.answer,
            "line": self.evidence.line if self.evidence else None,
            "source": self.evidence.source if self.evidence else None,
            "evidence": self.evidence.text if self.evidence else None,
            "note": self.note,
        }

@dataclass
class StartSummary:
    """One start (launch of vLLM) in the input: where it is and how it ended."""

    index: int
    first: Evidence | None
    last: Evidence | None
    verdict: str
    phase: str | None
    root_cause: str | None
    vllm_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "first_line": self.first.to_json() if self.first else None,
            "last_line": self.last.to_json() if self.last else None,
            "verdict": self.verdict,
            "phase": self.phase,
            "root_cause": self.root_cause,
            "vllm_version": self.vllm_version,
        }

@dataclass(frozen=True)
class StartKind:
    """Starts that ended alike (the same verdict, phase and root cause): how many, and the first and last of them
    (1-based, as the report numbers starts)."""

    verdict: str
    phase: str | None
    root_cause: str | None
    count: int
    first: int
    last: int

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "phase": self.phase, "root_cause": self.root_cause, "count": self.count,
                "first_start": self.first, "last_start": self.last}


def start_kinds(starts: list[StartSummary]) -> list[StartKind]:
    """The starts counted by how they ended, in the order each kind first came."""
    kinds: dict[tuple, list[int]] = {}
    for n, st in enumerate(starts, 1):
        seen = kinds.setdefault((st.verdict, st.phase, st.root_cause), [0, n, n])
        seen[0] += 1
        seen[2] = n
    return [StartKind(v, p, r, count, first, last) for (v, p, r), (count, first, last) in kinds.items()]


@dataclass(frozen=True)
class PhaseBasis:
    """What the phase of a failure rests on: the ready line, the words of an error, or nothing (the default)."""

    basis: str  # "ready_line" | "words" | "default"
    line: Evidence | None = None
    word: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"basis": self.basis, "line": self.line.to_json() if self.line else None, "word": self.word}

@dataclass
class Diagnosis:
    """What a log says about its last start: verdict ("failed" | "stuck" | "healthy" | "inconclusive"), the phase
    it failed or waits in ("startup" | "serving"), root cause, findings; `starts` lists every start."""

    verdict: str
    findings: list[Finding]
    root_cause: Finding | None
    timeline: StartupTimeline
    checklist: list[ChecklistItem]
    next_command: str | None
    sources: list[str]
    lines_examined: int = 0
    phase: str | None = None
    starts: list[StartSummary] = field(default_factory=list)
    lines_read: int = 0
    lines_selected: int = 0
    phase_basis: PhaseBasis | None = None
    # What `dsv4ctl.advice` needs that the JSON does not show: the log's name for suggested commands ("<log>"
    # for stdin or several files), whether dsv4ctl's stale-length fix ran, whether the model is DeepSeek-V4.
    facts: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def summary(self) -> str:
        """One line: the verdict, and the root cause with its line when the startup failed."""
        return summary_text(self)

    @property
    def exit_code(self) -> ExitCode:
        if self.verdict == "failed":
            return ExitCode.FAILED_KNOWN_CAUSE if self.root_cause_known else ExitCode.FAILED_UNKNOWN_CAUSE
        return VERDICT_EXIT[self.verdict]

    @property
    def root_cause_known(self) -> bool:
        return self.root_cause is not None and self.root_cause.id != "unrecognized_error"

    def to_json(self) -> dict[str, Any]:
        """The `--json` document, less `schema_version` (which `render.emit_json` adds)."""
        af = self.timeline.autofit
        return {
            "verdict": self.verdict,
            "phase": self.phase,
            "phase_basis": self.phase_basis.to_json() if self.phase_basis else None,
            "exit_code": int(self.exit_code),
            "summary": self.summary,
            "root_cause": self.root_cause.id if self.root_cause else None,
            "findings": [f.to_json() for f in self.findings],
            "autofit": af.to_json() if af else None,
            "timeline": self.timeline.to_json(),
            "checklist": [c.to_json() for c in self.checklist],
            "next_command": self.next_command,
            "sources": self.sources,
            "lines_examined": self.lines_examined,
            "lines_read": self.lines_read,
            "lines_selected": self.lines_selected,
            "starts": [st.to_json() for st in self.starts],
            "start_kinds": [k.to_json() for k in start_kinds(self.starts)] if len(self.starts) > 1 else [],
        }

def summary_text(d: Diagnosis) -> str:
    tl = d.timeline
    nth = f" (the last of {len(d.starts)} starts)" if len(d.starts) > 1 else ""
    if any(f.id == "not_a_vllm_log" for f in d.findings):
        n = d.lines_read
        if n == 0:
            return "The input is empty: there is no log to diagnose."
        return f"Not a vLLM log: read {n:,} line{'s' if n != 1 else ''}, none of them from vLLM or Python."
    if d.verdict == "failed":
        what = "The server failed while serving" if d.phase == "serving" else "Startup failed"
        if d.root_cause is None:
            return f"{what}{nth}; the cause is not in the log."
        where = f" (line {d.root_cause.line})" if d.root_cause.line else ""
        if d.root_cause.id == "unrecognized_error":
            return f"{what}{nth} with an error no signature explains{where}: {clip(str(d.root_cause.details.get('message') or d.root_cause.details.get('exception')), 100)}"
        return f"{what}{nth}: {d.root_cause.title}{where}."
    if d.verdict == "stuck":
        wait = next((f for f in d.findings if f.id == "start_stuck"), None)
        what = wait.details.get("waiting_for") if wait else "a wait"
        where = f" (line {wait.line})" if wait and wait.line else ""
        cause = f"; the cause: {d.root_cause.title}" if d.root_cause is not None and d.root_cause is not wait else ""
        serving = " while serving" if d.phase == "serving" else ""
        return f"The start is stuck{serving}{nth}: it waits for {what}{where} and nothing failed after it{cause}."
    if d.verdict == "healthy":
        if not tl.ready:
            return f"No failure: the server was answering requests{nth}."
        where = f" on {tl.ready_url}" if tl.ready_url else ""
        return f"Startup completed{where}{nth}."
    phase = tl.last_phase or "no vLLM startup lines"
    waiting = next((f for f in d.findings if f.id == "engine_waiting"), None)
    stalled = f"; processes were waiting on each other (line {waiting.line}): likely hung" if waiting else ""
    return f"No failure seen, but the log ends before the server was ready{nth} (last phase: {phase}){stalled}."

def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
