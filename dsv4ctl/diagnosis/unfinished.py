"""A start whose log ends before it was ready, with nothing failed: where it stopped, the last progress it showed
(the shards loaded, the graphs captured, and when), and the checks that tell a start still at work from one stopped
from outside. The log shows none of those causes, so they are checks to make, never fixes."""

from __future__ import annotations

import shlex

from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.diagnosis.analyzer import StartAnalyzer
from dsv4ctl.diagnosis.evidence import fill, line_of, make_finding
from dsv4ctl.diagnosis.model import Finding
from dsv4ctl.logs.reader import LogLine
from dsv4ctl.logs.timeline import StartupTimeline

_PHASE_TEXT = {
    "starting": "the engine was starting, before it loaded the weights",
    "loading_weights": "loading the weights",
    "weights_loaded": "compiling the model and profiling its memory",
    "profiling": "compiling the model and profiling its memory",
    "kv_cache": "allocating the KV cache",
    "capturing": "capturing CUDA graphs",
}


def unfinished_finding(a: StartAnalyzer, tl: StartupTimeline) -> Finding | None:
    """The note for a start that is neither ready nor failed and whose log ends in a startup phase; None otherwise."""
    phase = tl.last_phase
    if phase not in _PHASE_TEXT or tl.ready:
        return None
    details: dict = {"last_phase": phase, "phase_text": _PHASE_TEXT[phase], "progress_text": "",
                     "storage_check": _storage_check(tl) if phase in ("starting", "loading_weights") else ""}
    evidence: list[LogLine] = []
    when = a.last_ts.get(a.last.source) if a.last is not None else None
    progress = tl.weights_progress
    if phase == "loading_weights" and progress is not None:
        details["progress"] = {"shards_done": progress.done, "shards_total": progress.total, "percent": progress.percent,
                               "elapsed": progress.elapsed, "remaining": progress.remaining, "rate": progress.rate,
                               "line": progress.line}
        pct = f" ({progress.percent}%)" if progress.percent is not None else ""
        took = f" after {progress.elapsed}" if progress.elapsed else ""
        rate = f" at {progress.rate}" if progress.rate else ""
        left = f", tqdm's estimate {progress.remaining} more" if progress.remaining else ""
        details["progress_text"] = f": {progress.done} of {progress.total} shards{pct}{took}{rate}{left} (line {progress.line})"
        evidence.append(LogLine(progress.source, progress.line, None, None, None, None, progress.text, ""))
    elif phase == "capturing" and tl.capture is not None and tl.capture.total:
        details["progress_text"] = (f": {tl.capture.desc} {tl.capture.n} of {tl.capture.total}"
                                    + (f" (line {tl.capture.ref.line})" if tl.capture.ref else ""))
        if tl.capture.ref is not None:
            evidence.append(line_of(tl.capture.ref))
    if when:
        details["last_time"] = when
        details["progress_text"] += f"; the log's last time is {when}"
    if a.last is not None and all(a.last.lineno != e.lineno for e in evidence):
        evidence.append(a.last)
    sig = BY_ID["log_ends_before_ready"]
    f = make_finding(sig, [], details, extra=evidence)
    f.actions = [x for x in (fill(t, details) for t in sig.actions) if x]
    f.order = (max(a.last_ts.values(), default=""), 1 << 62)  # where the log ends: after every other finding
    return f


def _storage_check(tl: StartupTimeline) -> str:
    """Where the checkpoint is read from, as a check of its storage: a local directory by its path, a hub id from the
    Hugging Face cache."""
    where = (shlex.quote(tl.model) if tl.model and tl.model.startswith("/")
             else '"${HF_HUB_CACHE:-${HF_HOME:-$HOME/.cache/huggingface}/hub}"')
    return ("Check whether the checkpoint is read from slow or network storage (NFS, a network volume, an image layer "
            f"pulled lazily), and how full it is: df -hT {where}")
