"""The findings of one window of a start (before or after its ready line) and its root cause; warnings for
errors the server survived."""

from __future__ import annotations

from typing import Any

from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.diagnosis.analyzer import Hit, StartAnalyzer, window_of
from dsv4ctl.diagnosis.answers import answer, answer_scoped
from dsv4ctl.diagnosis.derive import derive
from dsv4ctl.diagnosis.dsv4 import full_capture, is_metadata_kernel, parse_version
from dsv4ctl.diagnosis.evidence import dedupe_frames, evidence_of, line_of, make_finding
from dsv4ctl.diagnosis.model import MAX_EVIDENCE, Finding
from dsv4ctl.logs.grammars import ERRNO_RE
from dsv4ctl.diagnosis.ranking import ends_in, indexed_finding, lookup, originating, quoting_wrapper, unrecognized_finding
from dsv4ctl.logs.grammars import DEATH_RE
from dsv4ctl.logs.records import ErrorRecord
from dsv4ctl.logs.timeline import StartupTimeline

def window_findings(
    a: StartAnalyzer, tl: StartupTimeline, log: str, by_id: dict[str, list[Hit]], records: list[ErrorRecord], dsv4: bool,
    window: str,
) -> tuple[list[Finding], Finding | None]:
    """The findings of one window (startup or serving) and, when it failed, its root cause."""
    by_id = {k: list(v) for k, v in by_id.items()}
    findings: list[Finding] = []

    # DeepGEMM metadata OOB: traced, or attributable to FULL capture on a DeepSeek-V4 model.
    ima = by_id.get("cuda_illegal_memory_access", [])
    nccl = by_id.get("nccl_error", [])
    nccl_cuda = [h for h in nccl if "unhandled cuda error" in h.line.message.lower() or "UnhandledCuda" in h.line.message]
    dg_hits = by_id.pop("deepgemm_metadata_oob", [])
    fault_hits = ima or nccl_cuda
    metadata = _metadata_fault(a, tl, log, records, dsv4, window, fault_hits, dg_hits, masked=not ima)
    if metadata is not None:
        findings.append(metadata)
        by_id.pop("cuda_illegal_memory_access", None)
    # NCCL errors when a CUDA fault exists anywhere are its symptom.
    if nccl and (ima or any(f.id == "deepgemm_metadata_oob" for f in findings)):
        f = make_finding(BY_ID["nccl_error"], nccl, {"symptom_of": "deepgemm_metadata_oob" if any(
            f.id == "deepgemm_metadata_oob" for f in findings) else "cuda_illegal_memory_access"})
        f.role = "symptom"
        findings.append(f)
        by_id.pop("nccl_error", None)

    for sid, sig_hits in by_id.items():
        sig = BY_ID[sid]
        if sid == "autofit_reduced":
            if tl.autofit is None:
                continue
            # The reduction that stands: in vLLM 0.34's measured mode the fit after capture, not the tentative one.
            ref = tl.autofit.ref
            chosen = [h for h in sig_hits if ref is not None and (h.line.source, h.line.lineno) == (ref.source, ref.line)]
            f = make_finding(sig, chosen or sig_hits[:1], derive(sid, sig_hits, a, tl, log))
        elif sid == "stale_max_model_len":
            # The assertion itself and the reduction that made the length stale.
            extra = [r.line for r in records if ends_in(r, "_build_c128a_metadata")][:1]
            if tl.autofit is not None and tl.autofit.ref is not None:
                extra.append(line_of(tl.autofit.ref))
            f = make_finding(sig, dedupe_frames(sig_hits), derive(sid, sig_hits, a, tl, log), extra=extra)
        else:
            f = make_finding(sig, sig_hits, derive(sid, sig_hits, a, tl, log))
        if sig.role == "request":
            f.severity = "warning"
        # A general signature's advice, refined by its family where one reads the values, or by the error it carries.
        record = next((r for r in records if any(r.spans(h.line) for h in sig_hits)), None)
        f = answer(f, record, tl, log, brief=a.light)
        findings.append(f)

    causes = [f for f in findings if f.role == "cause" and f.severity == "critical"]
    symptoms = [f for f in findings if f.role == "symptom" and f.severity == "critical"]
    # The originating error no signature explains.
    cause_hits = [h for sid, hs in by_id.items() if BY_ID[sid].role == "cause" for h in hs]
    cause_hits += [h for h in fault_hits]
    origin = originating(records)
    if origin is not None and not any(origin.spans(h.line) for h in cause_hits):
        quote = quoting_wrapper(origin, records)
        if quote is None or not any(quote.spans(h.line) for h in cause_hits):
            f = unrecognized_finding(origin, quote)
            if f.id == "unrecognized_error" and (entry := lookup(origin, quote)) is not None:
                f = indexed_finding(origin, quote, tl, entry)
            f = answer(f, origin, tl, log, brief=a.light)
            _same_error_elsewhere(f, origin, records)
            findings.append(f)
            causes.append(f)

    root: Finding | None = None
    if causes:
        root = min(causes, key=lambda f: (f.tier, f.order))
    elif symptoms:
        # Nothing explains it but a wrapper or a death: the deepest error statement the log holds (a worker
        # that died first, else the earliest).
        root = min(symptoms, key=lambda f: (f.id != "worker_died", f.order))
    return findings, root

def _same_error_elsewhere(f: Finding, origin: ErrorRecord, records: list[ErrorRecord]) -> None:
    """The same error (the same exception type, an OS error of the same errno) raised again by the same process on
    another object (PermissionError on /.config, then on /.triton): quoted beside the first, the answer covers both."""
    if origin.kind != "python" or origin.origin is None or not origin.type.endswith(("Error", "Exception")):
        return
    errno = ERRNO_RE.search(origin.origin.message)
    seen = {(e.source, e.line) for e in f.evidence}
    for r in records:
        if r is origin or r.process != origin.process or r.origin is None or len(f.evidence) >= MAX_EVIDENCE:
            continue
        text = r.origin.text if r.origin.message else r.text
        if (errno is not None and errno.group(0) in text and origin.type.rsplit(".", 1)[-1] in text) and \
                (r.line.source, r.line.lineno) not in seen:
            f.evidence.append(evidence_of(r.line))
            f.details.setdefault("same_error_lines", []).append(r.line.lineno)


def _metadata_fault(
    a: StartAnalyzer, tl: StartupTimeline, log: str, records: list[ErrorRecord], dsv4: bool, window: str,
    fault_hits: list[Hit], dg_hits: list[Hit], *, masked: bool,
) -> Finding | None:
    """The DeepGEMM metadata fault when the log traces it (the metadata builder's frames, or a core dump naming
    the kernel) or it is attributable (an illegal access during FULL capture of a DeepSeek-V4 model)."""
    dumps = [r for r in records if r.kind == "coredump" and is_metadata_kernel(str(r.details.get("kernel", "")))]
    if not (fault_hits or dumps):
        return None
    first_fault = min(fault_hits, key=lambda h: h.order) if fault_hits else None
    traced_lines = [ln for seq, ln in a.traced_deepgemm if window_of(a, seq) == window]
    traced = bool(traced_lines) or bool(dumps)
    attributable = dsv4 and first_fault is not None and full_capture(tl, first_fault)
    if not (traced or attributable):
        return None
    details = derive("deepgemm_metadata_oob", fault_hits, a, tl, log)
    details["attribution"] = "traced" if traced else "attributable"
    in_capture = first_fault is not None and full_capture(tl, first_fault)
    details["when_text"] = (
        "FULL CUDA-graph capture feeds it exactly that (dummy decode batches have seq_len 1, the indexer divides by "
        "compress_ratio 4, 1 // 4 = 0, and capture sizes are multiples of 32), and this fault came during FULL capture."
        if in_capture else
        "This log does not show what ran the batch that met it: the warm-up of FULL CUDA graphs makes such batches, and "
        "a decode step while serving can too.")
    details["masked_by_nccl"] = masked
    if dumps:
        details["kernel"] = dumps[0].details["kernel"]
    details["capture"] = tl.capture.desc + f" {tl.capture.n}/{tl.capture.total}" if tl.capture else None
    details["vllm_version"] = tl.vllm_version
    v = parse_version(tl.vllm_version)
    if tl.deep_gemm_source == "vendored" and v is not None and v[:2] >= (0, 28):
        details["note"] = (
            "This log shows vLLM used its vendored DeepGEMM, which is guarded from 0.28.0 on; "
            "the fault may have another cause."
        )
    elif v is not None and v[:2] <= (0, 27):
        details["note"] = f"vLLM {tl.vllm_version} vendors an unguarded DeepGEMM (≤ 0.27.x)."
    f = make_finding(BY_ID["deepgemm_metadata_oob"], ([first_fault] if first_fault else []) + dg_hits, details,
                     extra=traced_lines)
    if first_fault is not None:
        # The fault's own line first: the call sites place it, the fault is what happened.
        fault = evidence_of(first_fault.line)
        f.evidence = [fault] + [e for e in f.evidence if (e.source, e.line) != (fault.source, fault.line)]
    if dumps:
        # The core dump names the faulting kernel: that line holds the cause.
        kernel = evidence_of(dumps[0].details["kernel_line"])
        rest = [e for e in f.evidence if (e.source, e.line) != (kernel.source, kernel.line)]
        f.evidence = [kernel, *rest][:MAX_EVIDENCE]
    f.order = first_fault.order if first_fault else dumps[0].order
    return f


def serving_warnings(
    a: StartAnalyzer, tl: StartupTimeline, log: str, by_id: dict[str, list[Hit]], records: list[ErrorRecord]
) -> list[Finding]:
    """Errors while serving that left the server up: warnings."""
    findings: list[Finding] = []
    ready_line = tl.ready_ref.line if tl.ready_ref else None
    for sid, sig_hits in by_id.items():
        sig = BY_ID[sid]
        if sig.role == "note" or sig.context:
            continue
        base = derive(sid, sig_hits, a, tl, log)
        if sig.role == "request":
            f = make_finding(sig, sig_hits, base)
            f.severity = "warning"
            findings.append(f)
            continue
        if sig.role == "symptom":
            continue
        details = {"classified_as": sid, "ready_line": ready_line, **{k: v for k, v in base.items() if k not in ("model", "log")}}
        f = make_finding(BY_ID["error_after_startup"], sig_hits, details)
        f.title = f"Error after startup completed: {sig.title}"
        findings.append(f)
    explained = [h for hs in by_id.values() for h in hs]
    unexplained = [r for r in records if not any(r.spans(h.line) for h in explained)]
    origin = originating(unexplained)
    if origin is not None and not findings:
        details = {"classified_as": "unrecognized_error", "ready_line": ready_line, "exception": origin.type}
        extra = [origin.frames_line] if origin.frames_line else []
        f = make_finding(BY_ID["error_after_startup"], [], details, extra=[origin.line] + extra)
        f.evidence.sort(key=lambda e: (e.source, e.line) != (origin.line.source, origin.line.lineno))
        f.order = origin.order
        findings.append(answer_scoped(f, origin, tl, log))
    return findings

def is_request_error(record: ErrorRecord, by_id: dict[str, list[Hit]]) -> bool:
    """Whether a request's error of the catalogue (a prompt too long) states this record: an offline script
    that dies of it (uncaught) still had an engine that answered."""
    return any(record.spans(h.line) for hs in by_id.values() for h in hs if h.sig.role == "request")

def takes_down(a: StartAnalyzer, h: Hit) -> bool:
    """Whether a signature's line after the ready line says the server went down: a fatal signature (of the
    wrappers, only those saying the engine died: a worker's failed RPC of another kind leaves it up), unless
    the server answered requests after it."""
    sig = h.sig
    if not sig.fatal or sig.context or (a.alive_seq is not None and h.seq < a.alive_seq):
        return False
    return sig.id != "engine_core_failed" or bool(DEATH_RE.search(h.line.message))

def survived_warnings(a: StartAnalyzer, survived: list[ErrorRecord], findings: list[Finding], tl: StartupTimeline,
                      log: str) -> list[Finding]:
    """The originating error of those the server answered requests after (it stayed up): a warning, named
    from the index where it knows the message; nothing when a finding already quotes that line."""
    origin = originating(survived, survived=True)
    if origin is None or any(any(e.line == origin.line.lineno and e.source == origin.line.source for e in f.evidence)
                             for f in findings):
        return []
    alive = a.alive.lineno if a.alive is not None and (origin.kind != "http_error" or a.alive_seq > origin.seq) else None
    details: dict[str, Any] = {
        "exception": origin.type,
        "alive_line": alive,
        "answered": f"The server answered requests after this error (line {alive})" if alive is not None
        else "This is the server's answer to a request: an error body a client received",
    }
    entry = lookup(origin, None)
    if entry is not None:
        details.update(cite=entry.cite, function=entry.function, package=entry.package)
    extra = [origin.frames_line] if origin.frames_line else []
    f = make_finding(BY_ID["error_survived"], [], details, extra=[origin.line] + extra)
    if entry is not None:
        f.meaning += f" The message is {entry.package}'s, from {entry.function} ({entry.cite})."
    f.evidence.sort(key=lambda e: (e.source, e.line) != (origin.line.source, origin.line.lineno))
    f.order = origin.order
    return [answer_scoped(f, origin, tl, log)]
