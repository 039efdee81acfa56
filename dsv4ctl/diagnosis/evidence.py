"""Findings from their evidence: quoting lines, filling the catalogue's texts, the parts of suggested commands."""

from __future__ import annotations

import shlex
import string
from typing import TYPE_CHECKING, Any

from dsv4ctl.catalogue.signature import Signature
from dsv4ctl.diagnosis.model import MAX_EVIDENCE, Evidence, Finding
from dsv4ctl.logs import deployment
from dsv4ctl.logs.reader import LogLine, printable
from dsv4ctl.logs.timeline import LineRef, StartupTimeline

if TYPE_CHECKING:
    from dsv4ctl.diagnosis.analyzer import Hit

def line_of(ref: LineRef) -> LogLine:
    return LogLine(ref.source, ref.line, None, None, None, None, ref.text, ref.text)

def dedupe_frames(hits: list[Hit]) -> list[Hit]:
    """Keep the first process's lines when every worker printed the same traceback."""
    if not hits:
        return hits
    first_proc = hits[0].line.process
    same = [h for h in hits if h.line.process == first_proc]
    return same or hits

def is_worker(process: str | None) -> bool:
    return bool(process) and "worker" in process.lower()

def evidence_of(line: LogLine) -> Evidence:
    return Evidence(line.source, line.lineno, line.message, line.process, printable(line.raw) if line.raw else None)

def ref_evidence(ref: LineRef | None) -> Evidence | None:
    return Evidence(ref.source, ref.line, ref.text) if ref else None

class _Fill(string.Formatter):
    """`str.format` with one conversion more: `{name!q}` is the value as one shell word (`shlex.quote`), for a value
    that stands in a command (a model path, a log file: `/models/DeepSeek V4` stays one argument)."""

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion == "q":
            return shlex.quote(str(value))
        return super().convert_field(value, conversion)


_FILL = _Fill()


def fill(template: str, details: dict[str, Any]) -> str | None:
    try:
        if "!q}" in template:
            return _FILL.vformat(template, (), details)
        return template.format(**details)
    except (KeyError, ValueError, IndexError, TypeError, AttributeError):
        return None

def make_finding(sig: Signature, hits: list[Hit], details: dict[str, Any], extra: list[LogLine] | None = None) -> Finding:
    if hits and hits[0].groups:
        # Named groups of the signature's patterns: the numbers the message itself carries.
        details = {**hits[0].groups, **details}
    # The signature's own lines first (in log order), then the supporting lines.
    seen: set[tuple[str, int]] = set()
    evidence: list[Evidence] = []
    # With several files, lines of the same second sort worker-first: a worker's own error comes
    # before the engine's echo of it.
    ordered = sorted(hits, key=lambda h: (h.order[0], bool(h.order[0]) and not is_worker(h.line.process), h.order[1]))
    primary = [h.line for h in ordered]
    for line in primary + sorted(extra or [], key=lambda ln: (ln.source, ln.lineno)):
        k = (line.source, line.lineno)
        if k in seen:
            continue
        seen.add(k)
        evidence.append(evidence_of(line))
    evidence = evidence[:MAX_EVIDENCE]
    title = fill(sig.title, details) or sig.title.split("{")[0].strip()
    meaning = fill(sig.meaning, details) or sig.meaning.split("{")[0].strip()
    actions = [a for a in (fill(t, details) for t in sig.actions) if a]
    return Finding(
        id=sig.id,
        severity=sig.severity,
        title=title,
        meaning=meaning,
        evidence=evidence,
        details=details,
        actions=actions,
        role=sig.role,
        tier=sig.tier,
        order=min(h.order for h in hits) if hits else (),
    )

_SPLIT = ("max_model_len", "tensor_parallel_size", "data_parallel_size", "enable_expert_parallel")


def command_parts(tl: StartupTimeline, log: str) -> dict[str, Any]:
    """What suggested commands are built from: the model and log as they are (only when known: a command with a
    placeholder would not run; a template quotes them as shell words, `{model!q}`) and the launch's own flags, quoted
    already (`_…` keys stay out of the JSON details)."""
    parts: dict[str, Any] = {
        "_serve_flags": deployment.serve_flags(tl),
        "_serve_all": deployment.serve_flags(tl, drop=()),
        "_fit_flags": deployment.fit_length_flags(tl),
        # The launch without one setting, for the advice that drops it (DSpark's checks, a utilization that caps vLLM
        # 0.34's measured KV cache, a tensor-parallel size to change).
        "_serve_no_spec": deployment.serve_flags(tl, drop=("speculative_config",)),
        "_serve_no_util": deployment.serve_flags(tl, drop=("gpu_memory_utilization",)),
        "_serve_no_split": deployment.serve_flags(tl, drop=_SPLIT),
    }
    if tl.model:
        parts["model"] = tl.model
    if log != "<log>" and plans_from_log(tl):
        parts["log"] = log  # for `fit-length --from-log`, which needs the measured KV memory
    return parts


def plans_from_log(tl: StartupTimeline) -> bool:
    """Whether `fit-length --from-log` plans from this log's KV memory: the "Available KV cache memory" line before
    vLLM 0.34 and with 0.34's measured KV cache off; in the measured mode that line is a reservation and the log's
    memory is the blocks vLLM committed after warm-up (`LogCalibration.measured_kv_blocks`), which the planner
    takes as exactly as the line."""
    return tl.kv_memory_gib is not None
