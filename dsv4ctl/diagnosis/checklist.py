"""The stale-max_model_len checklist: six questions from the upstream analysis, answered from the log."""

from __future__ import annotations

from pathlib import Path

from dsv4ctl.catalogue.signatures import FIXED_STALE
from dsv4ctl.diagnosis.analyzer import StartAnalyzer
from dsv4ctl.diagnosis.dsv4 import stale_bug_status
from dsv4ctl.diagnosis.evidence import evidence_of, ref_evidence
from dsv4ctl.diagnosis.model import ChecklistItem, Finding
from dsv4ctl.diagnosis.ranking import ends_in, originating
from dsv4ctl.logs.records import ErrorRecord
from dsv4ctl.logs.timeline import StartupTimeline
from dsv4ctl.units import format_tokens

CHECKLIST_QUESTIONS = (
    "Was --max-model-len set to auto or -1?",
    'Did vLLM print "max_model_len: reduced from ... to ..."?',
    "Does the traceback end in sparse_mla.py::_build_c128a_metadata?",
    "Is the failure an AssertionError rather than a direct CUDA OOM?",
    "Does an explicit smaller --max-model-len make startup reliable?",
    "Does this vLLM lack the fix (PR #58149: ModelState.max_model_len follows auto-fit)?",
)

# The answer to question 5 when one log cannot show it; `dsv4ctl.advice` adds the length to try.
EXPLICIT_LENGTH_UNKNOWN = "one log cannot show it; compare a start with an explicit length"


def checklist(a: StartAnalyzer, tl: StartupTimeline, findings: list[Finding], pre_exc: list[ErrorRecord]) -> list[ChecklistItem]:
    """The six answers, each with the line it rests on; `pre_exc`: the errors before the start ended."""
    return [
        _auto_length(tl),
        _reduction_printed(tl),
        _ends_in_c128a(a, pre_exc),
        _assertion_not_oom(findings, pre_exc),
        _explicit_length(tl, findings),
        _fix_missing(tl),
    ]


# The answers that rule the stale-length crash out when "no": no auto length, no reduction, a traceback that ends
# elsewhere, a failure that is no AssertionError (or is a CUDA OOM), a release that has the fix or predates the bug.
_RULES_OUT = (0, 1, 2, 3, 5)


def could_be_stale(verdict: str, phase: str | None, root: Finding | None, answers: list[ChecklistItem]) -> bool:
    """Whether the checklist is worth asking: the root cause is the stale-length assertion, or the startup failed and
    none of the answers rules that crash out (a port in use, a CUDA OOM, an NCCL error, a failure while serving do)."""
    if root is not None and root.id == "stale_max_model_len":
        return True
    if verdict != "failed" or phase != "startup" or len(answers) != len(CHECKLIST_QUESTIONS):
        return False
    return all(answers[i].answer != "no" for i in _RULES_OUT)


def _auto_length(tl: StartupTimeline) -> ChecklistItem:
    q, refs, arg = CHECKLIST_QUESTIONS[0], tl.refs, tl.max_model_len_arg
    if arg is not None and arg.lower() in ("-1", "auto"):
        return ChecklistItem(q, "yes", ref_evidence(refs.get("max_model_len_arg")), f"max_model_len={arg}")
    if arg is not None:
        return ChecklistItem(q, "no", ref_evidence(refs.get("max_model_len_arg")), f"explicit max_model_len={arg}")
    if tl.autofit is not None or tl.autofit_full_fit or tl.tentative_autofit is not None:
        ref = refs.get("autofit") or refs.get("autofit_full") or refs.get("tentative_autofit")
        return ChecklistItem(q, "yes", ref_evidence(ref), "auto-fit runs only with --max-model-len auto / -1")
    if "nondefault_args" in refs:
        return ChecklistItem(
            q, "no", ref_evidence(refs["nondefault_args"]), "not among the non-default args: the model's full length is used"
        )
    return ChecklistItem(q, "not in log")


def _reduction_printed(tl: StartupTimeline) -> ChecklistItem:
    q, refs = CHECKLIST_QUESTIONS[1], tl.refs
    t = tl.tentative_autofit  # vLLM 0.34's measured mode: the fit before CUDA-graph capture
    if tl.autofit is not None:
        note = f"{format_tokens(tl.autofit.from_len)} → {format_tokens(tl.autofit.to_len)}"
        if t is not None and (t.from_len, t.to_len) != (tl.autofit.from_len, tl.autofit.to_len):
            note += " after CUDA graph capture (the tentative fit before it: " + (
                "full context" if t.from_len == t.to_len else f"{format_tokens(t.from_len)} → {format_tokens(t.to_len)}") + ")"
        return ChecklistItem(q, "yes", ref_evidence(refs.get("autofit")), note)
    if t is not None and t.to_len < t.from_len:
        return ChecklistItem(q, "yes", ref_evidence(refs.get("tentative_autofit")),
                             f"{format_tokens(t.from_len)} → {format_tokens(t.to_len)}, tentative (before CUDA graph "
                             "capture); the log ends before the final fit")
    if t is not None and not tl.autofit_full_fit:
        return ChecklistItem(q, "not in log", ref_evidence(refs.get("tentative_autofit")),
                             "the tentative fit kept the full context; the log ends before the fit after CUDA graph capture")
    if tl.autofit_full_fit or tl.kv_cache_tokens is not None:
        ref = refs.get("autofit_full") or refs.get("kv_cache_size")
        return ChecklistItem(q, "no", ref_evidence(ref), "the KV cache was sized without a reduction")
    if tl.available_kv_gib is not None:
        return ChecklistItem(
            q, "no", ref_evidence(refs.get("available_kv")), "the KV-cache memory was measured and no reduction followed"
        )
    return ChecklistItem(q, "not in log", None, "the log ends before the KV cache was sized")


def _ends_in_c128a(a: StartAnalyzer, pre_exc: list[ErrorRecord]) -> ChecklistItem:
    q = CHECKLIST_QUESTIONS[2]
    ends_there = [e for e in pre_exc if ends_in(e, "_build_c128a_metadata")]
    frames_there = [h for h in a.hits if "_build_c128a_metadata" in h.line.message and not h.after_ready]
    if ends_there:
        return ChecklistItem(q, "yes", evidence_of(ends_there[0].frames_line), "the sparse-MLA C128A assertion")
    if frames_there:
        return ChecklistItem(q, "yes", evidence_of(frames_there[0].line), "the sparse-MLA C128A metadata builder")
    if pre_exc:
        first = originating(pre_exc) or pre_exc[0]
        frame = first.origin.last_frame if first.origin else None
        if frame is None:
            return ChecklistItem(q, "not in log", evidence_of(first.line), "the error is quoted without its traceback's frames")
        return ChecklistItem(q, "no", evidence_of(first.line), f"the traceback ends in {Path(frame.file).name}::{frame.function}")
    return ChecklistItem(q, "not in log", None, "no traceback before the startup ended")


def _assertion_not_oom(findings: list[Finding], pre_exc: list[ErrorRecord]) -> ChecklistItem:
    q = CHECKLIST_QUESTIONS[3]
    oom = next((f for f in findings if f.id == "cuda_oom"), None)
    asserts = [e for e in pre_exc if e.type.endswith("AssertionError")]
    if oom is not None:
        return ChecklistItem(q, "no", oom.evidence[0] if oom.evidence else None, "a CUDA out-of-memory error")
    if asserts:
        return ChecklistItem(q, "yes", evidence_of(asserts[0].line), "an AssertionError, no CUDA OOM")
    if pre_exc:
        first = originating(pre_exc) or pre_exc[0]
        return ChecklistItem(q, "no", evidence_of(first.line), f"the failure is {first.type}")
    return ChecklistItem(q, "not in log", None, "no error before the startup ended")


def _explicit_length(tl: StartupTimeline, findings: list[Finding]) -> ChecklistItem:
    q, arg = CHECKLIST_QUESTIONS[4], tl.max_model_len_arg
    if not (arg is not None and arg.removeprefix("-").isdecimal() and int(arg) > 0):
        return ChecklistItem(q, "not in log", None, EXPLICIT_LENGTH_UNKNOWN)
    ev = ref_evidence(tl.refs.get("max_model_len_arg"))
    if tl.ready:
        return ChecklistItem(q, "yes", ref_evidence(tl.ready_ref) or ev, f"this start used --max-model-len {arg} and completed")
    if any(f.is_root_cause and f.id == "stale_max_model_len" for f in findings):
        return ChecklistItem(q, "no", ev, f"this start used --max-model-len {arg} and still failed")
    if (root := next((f for f in findings if f.is_root_cause), None)) is not None:
        return ChecklistItem(q, "not in log", ev, f"this start used --max-model-len {arg} and failed for another reason ({root.id})")
    return ChecklistItem(q, "not in log", ev, f"this start used --max-model-len {arg} but did not finish")


def _fix_missing(tl: StartupTimeline) -> ChecklistItem:
    q = CHECKLIST_QUESTIONS[5]
    status = stale_bug_status(tl.vllm_version)
    ev = ref_evidence(tl.refs.get("vllm_version"))
    if status == "affected":
        item = ChecklistItem(q, "yes", ev, f"vLLM {tl.vllm_version}: 0.29.0–0.30.x lack it; fixed in {FIXED_STALE}")
    elif status == "fixed":
        item = ChecklistItem(q, "no", ev, f"vLLM {tl.vllm_version} has ModelState.max_model_len as a property (fixed in {FIXED_STALE})")
    elif status == "not_affected":
        item = ChecklistItem(q, "no", ev, f"vLLM {tl.vllm_version} predates the assertion (added in 0.29.0)")
    else:
        return ChecklistItem(q, "not in log", None, "the vLLM version is not in the log")
    if tl.vllm_version and "dev" in tl.vllm_version:
        item.note = (item.note or "") + "; development build: check that commit"
    return item
