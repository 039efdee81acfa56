"""The numbers a finding shows, derived from the log itself (per signature)."""

from __future__ import annotations

import re
import shlex
from typing import Any

from dsv4ctl import re_cache
from dsv4ctl.catalogue.signatures import AFFECTED_STALE, FIXED_STALE
from dsv4ctl.diagnosis.analyzer import Hit, StartAnalyzer
from dsv4ctl.diagnosis import derive_v034
from dsv4ctl.diagnosis.dsv4 import C128A_COMPRESS_RATIO, C128A_TOPK_ALIGNMENT, c128a_capacity, stale_bug_status
from dsv4ctl.diagnosis.evidence import command_parts
from dsv4ctl.logs.timeline import StartupTimeline
from dsv4ctl.units import format_tokens

# The startup phase the timeline had reached before an OOM: the phase it ran out in. No phase (an excerpt of the
# error alone) is no evidence of one.
PHASE_TO_OOM = {
    "starting": "load",
    "loading_weights": "load",
    "weights_loaded": "profile",
    "profiling": "profile",
    "kv_cache": "profile",
    "capturing": "capture",
    "ready": "serving",
    "shutdown": "serving",
}

# The functions an OOM's traceback runs through, the innermost phase first (vllm==0.32.0 v1/worker/gpu_model_runner.py
# capture_model, profile_run, load_model; v1/worker/gpu_worker.py determine_available_memory, load_model,
# execute_model; v1/engine/core.py _initialize_kv_caches, run_busy_loop, step).
_OOM_FRAMES = (
    ("capture", frozenset({"capture_model", "_capture_cudagraphs", "capture_graphs"})),
    ("profile", frozenset({"profile_run", "determine_available_memory", "_initialize_kv_caches", "initialize_from_config",
                           "determine_num_available_blocks", "compile_or_warm_up_model", "_dummy_sampler_run"})),
    ("load", frozenset({"load_model", "load_weights", "weight_loader"})),
    ("serving", frozenset({"execute_model", "run_busy_loop", "step", "step_with_batch_queue", "sample_tokens"})),
)

# The engine's own words for what it was doing (as `conclude.PHASE_WORDS`): starting, or running its loop.
_STARTING_WORDS = ("EngineCore failed to start", "WorkerProc failed to start", "WorkerProc initialization failed",
                   "Engine core initialization failed")
_SERVING_WORDS = ("EngineCore encountered a fatal error", "output_handler failed")

_OOM_PHASE_TEXT = {
    "load": "loading the weights",
    "profile": "profiling memory / allocating the KV cache",
    "capture": "capturing CUDA graphs",
    "serving": "serving requests",
}
_OOM_PHASE_IF = {
    "load": "If it ran out loading the weights, the weights do not fit: free GPU memory held by other processes, add "
    "GPUs (--tensor-parallel-size, or --data-parallel-size with --enable-expert-parallel), or use a quantized checkpoint",
    "profile": "If it ran out profiling memory or allocating the KV cache: lower the activation peak "
    "(--max-num-batched-tokens, --max-num-seqs) or leave more headroom with a lower --gpu-memory-utilization",
    "capture": "If it ran out capturing CUDA graphs: lower --gpu-memory-utilization so graphs have room, lower "
    "--max-num-seqs, or run with --enforce-eager",
    "serving": "If it ran out serving requests: lower --max-num-seqs / --max-num-batched-tokens, or lower "
    "--gpu-memory-utilization",
}

_OOM_PHASE_ACTION = {
    "load": "The weights do not fit: free GPU memory held by other processes, add GPUs "
    "(--tensor-parallel-size, or --data-parallel-size with --enable-expert-parallel), or use a quantized checkpoint",
    "profile": "Lower the activation peak (--max-num-batched-tokens, --max-num-seqs) or leave more headroom with a "
    "lower --gpu-memory-utilization",
    "capture": "CUDA graphs did not fit: lower --gpu-memory-utilization so graphs have room, lower --max-num-seqs, "
    "or run with --enforce-eager",
    "serving": "Lower --max-num-seqs / --max-num-batched-tokens, or lower --gpu-memory-utilization",
}

FITS = "_fits"  # the tokens the log says fit: `dsv4ctl.advice` plans the safe length from it (not in the JSON)


def _fits(d: dict[str, Any], a: StartAnalyzer, fits: int) -> None:
    if not a.light:  # an earlier start: its verdict and root cause only, nothing planned
        d[FITS] = fits


def derive(sig_id: str, hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline, log: str) -> dict[str, Any]:
    """Numbers a finding shows, derived from the log itself."""
    d: dict[str, Any] = {"occurrences": a.occurrences(sig_id)}
    if not a.light:  # an earlier start's commands are never shown
        d.update(command_parts(tl, log))
    af = tl.autofit
    if sig_id in ("autofit_reduced", "stale_max_model_len") and af is not None:
        d.update(
            from_len=af.from_len,
            to_len=af.to_len,
            memory=af.memory_text or "memory not stated",
            memory_gib=af.memory_gib,
            tentative_text=derive_v034.tentative_text(tl),
        )
        _fits(d, a, af.to_len)
    per_signature = _DERIVE.get(sig_id)
    if per_signature is not None:
        per_signature(d, [h.line.message for h in hits], hits, a, tl)
    return d


def _stale(d: dict[str, Any], msgs: list[str], hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline) -> None:
    af = tl.autofit
    d.update(affected=AFFECTED_STALE, fixed=FIXED_STALE, vllm_version=tl.vllm_version)
    d["version_status"] = stale_bug_status(tl.vllm_version)
    if af is not None:
        cap = c128a_capacity(af.to_len)
        req = af.from_len // C128A_COMPRESS_RATIO
        d.update(capacity=cap, requested=req)
        # Operands inside the formula without thousands separators (a comma there reads like another
        # argument); the results, standalone numbers, with them.
        d["arithmetic"] = (
            f"capacity align_up(cdiv({af.to_len}, {C128A_COMPRESS_RATIO}), {C128A_TOPK_ALIGNMENT}) "
            f"= {format_tokens(cap)} {'<' if cap < req else '>='} requested {af.from_len} // "
            f"{C128A_COMPRESS_RATIO} = {format_tokens(req)}"
        )
    elif tl.max_concurrency_tokens:
        _fits(d, a, tl.max_concurrency_tokens)
    if af is None:
        # The assertion is in the log, the reduction that makes the length stale is not: a check to make, and the
        # workaround that holds either way (a length set explicitly is never changed by auto-fit).
        d["premise_text"] = (" This log does not show the auto-fit reduction itself (vLLM logs \"reduced max_model_len "
                             "from A to B\" before capture), so that cause is to be confirmed.")
        d["premise_check"] = ("Confirm auto-fit ran: look for \"reduced max_model_len\" (or \"max_model_len: reduced\") "
                              "in the full log of this start")
        fit = (f"; this computes one: dsv4ctl fit-length {shlex.quote(d['model'])}{d.get('_fit_flags', '')}" if d.get("model") else
               " (dsv4ctl's fit-length computes one for the model)")
        d["length_action"] = ("Set an explicit --max-model-len that fits, so auto-fit never changes it (--enforce-eager "
                              f"also avoids the capture that trips the assertion){fit}")
    else:
        d["premise_text"] = ""


_KV_NUMBERS = (
    ("max_model_len", r"max seq len \(([0-9]+)\)", int),
    ("needed_gib", r"\(([0-9]+(?:\.[0-9]+)?) GiB KV cache is needed", float),
    ("available_gib", r"available KV cache memory \(([0-9]+(?:\.[0-9]+)?) GiB\)", float),
    ("estimated_max_model_len", r"estimated maximum model length is ([0-9]+)", int),
    ("kv_cache_tokens", r"stored in KV cache \(([0-9]+)\)", int),
)


def _kv_insufficient(d: dict[str, Any], msgs: list[str], hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline) -> None:
    text = " ".join(msgs)
    for key, pattern, kind in _KV_NUMBERS:
        if m := re.search(pattern, text):
            d[key] = kind(m.group(1))
    fits = d.get("estimated_max_model_len") or d.get("kv_cache_tokens")
    if fits:
        _fits(d, a, fits)
    if "Cannot auto-fit" in text:
        d["reason"] = "not enough memory for even a single token"
    elif "No available memory" in text:
        d["reason"] = "no memory left for the KV cache at all"
    clause = ""
    if "needed_gib" in d and "available_gib" in d:
        clause = f" ({d['needed_gib']} GiB needed, {d['available_gib']} GiB available)"
    elif "reason" in d:
        clause = f" ({d['reason']})"
    d["needed_clause"] = clause
    derive_v034.kv_refusal(d, text, tl)
    if "more_memory_text" in d:
        return
    # Raising --gpu-memory-utilization is an answer only where the launch's value shows room: the log names it below
    # 0.95. Where the log does not name it, it is a check to make (vllm==0.27.1-0.33.0 vllm/config/cache.py:
    # gpu_memory_utilization default 0.92).
    util = (tl.serve_args or {}).get("gpu_memory_utilization")
    if isinstance(util, (int, float)) and util < 0.95:
        d["more_memory_text"] = (f"a higher --gpu-memory-utilization (this launch: {util}), or more GPUs (tensor/pipeline "
                                 "parallel)")
    elif util is not None:
        d["more_memory_text"] = f"more GPUs (tensor/pipeline parallel), or GPUs with more memory (this launch: {util})"
    else:
        d["more_memory_text"] = ("more GPUs (tensor/pipeline parallel); and check this launch's --gpu-memory-utilization, "
                                 "which the log does not show (vLLM's default is 0.92): a lower value leaves the KV cache "
                                 "less, and so does memory something else holds on the GPU (nvidia-smi)")


def oom_phase(first: Hit, a: StartAnalyzer) -> tuple[str, tuple[str, ...]]:
    """The phase an OOM came in, from the evidence only: the server was ready before it, the OOM's own words or frames,
    else the last phase the timeline reached; "unknown" when none shows it, with the phases it can have been (the
    engine's own words narrow them: it failed to start, or died running its loop)."""
    message = first.line.message
    if first.after_ready:
        return "serving", ()
    if "Failed to load model" in message:
        return "load", ()
    if "warming up" in message:
        return "profile", ()
    record = next((r for r in a.records if r.spans(first.line)), None)
    functions = (set(record.functions) if record is not None else set()) | a.worker_methods
    for phase, names in _OOM_FRAMES:
        if functions & names:
            return phase, ()
    if first.phase in PHASE_TO_OOM:
        return PHASE_TO_OOM[first.phase], ()
    words = " ".join(h.line.message for h in a.hits if h.sig.id in ("engine_core_failed", "shutdown_noise"))
    if any(w in words for w in _SERVING_WORDS):
        return "serving", ()
    if any(w in words for w in _STARTING_WORDS):
        return "unknown", ("load", "profile", "capture")
    return "unknown", ("load", "profile", "capture", "serving")


def _cuda_oom(d: dict[str, Any], msgs: list[str], hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline) -> None:
    phase, possible = oom_phase(hits[0], a)
    if phase != "unknown":
        d.update(phase=phase, phase_text=f" while {_OOM_PHASE_TEXT[phase]}", phase_action=_OOM_PHASE_ACTION[phase])
    else:
        texts = [_OOM_PHASE_TEXT[p] for p in possible]
        d.update(phase="unknown", possible_phases=list(possible),
                 phase_text=f"; the log does not show in which phase ({', '.join(texts[:-1])} or {texts[-1]})")
        for k, p in enumerate(possible):
            d["phase_action" if k == 0 else f"phase_action_{k + 1}"] = _OOM_PHASE_IF[p]
    if m := re.search(r"Tried to allocate ([0-9.]+ [GM]iB)", " ".join(msgs)):
        d["tried_to_allocate"] = m.group(1)


def _engine_core_failed(d: dict[str, Any], msgs: list[str], hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline) -> None:
    """What the engine's own words say failed: its start, its loop while serving, or a worker (words of neither)."""
    text = " ".join(msgs)
    if any(w in text for w in _STARTING_WORDS):
        d["what_failed"] = "its startup failed"
    elif any(w in text for w in _SERVING_WORDS) or "EngineDeadError" in text or all(h.after_ready for h in hits):
        d["what_failed"] = "it died while serving"
    else:
        d["what_failed"] = "a worker raised an exception"


_FREE_RE = re_cache.compile(
    r"\(([0-9]+(?:\.[0-9]+)?)/([0-9]+(?:\.[0-9]+)?) GiB\) on startup is less than desired GPU memory utilization "
    r"\(([0-9]+(?:\.[0-9]+)?), ([0-9]+(?:\.[0-9]+)?) GiB\)"
)


def _free_memory(d: dict[str, Any], msgs: list[str], hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline) -> None:
    m = _FREE_RE.search(msgs[0])
    if m is None:
        d["free_text"] = "see the evidence"
        return
    free, total, util, wanted = (float(x) for x in m.groups())
    d.update(free_gib=free, total_gib=total, requested_utilization=util, requested_gib=wanted)
    d["free_text"] = f"{free} GiB free of {total} GiB, {wanted} GiB requested at {util}"
    # What the message's own numbers show: what was in use before vLLM asked, and by how much it fell short.
    in_use, short = round(total - free, 2), round(wanted - free, 2)
    d.update(in_use_gib=in_use, short_gib=short)
    d["in_use_text"] = (f"{total} − {free} = {in_use:.2f} GiB of the device was already in use at startup, and the request "
                        f"fell short by {wanted} − {free} = {short:.2f} GiB")
    if total > 0:
        d["suggested_util"] = round(max(0.01, int(free / total * 100) / 100 - 0.01), 2)


def _worker_died(d: dict[str, Any], msgs: list[str], hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline) -> None:
    codes = [m.group(1) for t in msgs if (m := re.search(r"exit code: (-?[0-9]+|None)", t))]
    d["exit_codes"] = [None if c == "None" else int(c) for c in codes]
    if not codes:
        d["exit_text"] = "exit code not stated"
    elif codes[0] == "None":
        d["exit_text"] = "no exit code yet: it was still stopping"
    else:
        d["exit_text"] = f"exit code {codes[0]}"


_BIND_RE = re_cache.compile(r"bind on address \('(?P<host>[^']*)', (?P<port>[0-9]+)\)")


def _address_in_use(d: dict[str, Any], msgs: list[str], hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline) -> None:
    m = _BIND_RE.search(" ".join(msgs))
    port = m.group("port") if m else None
    d["port_text"] = f"{m.group('host')}:{port} " if m else ""
    d["bind_text"] = f"{m.group('host')}:{port}" if m else "the message does not name the address"
    d["ss_command"] = f"ss -ltnp 'sport = :{port}'" if port else "ss -ltnp"


def _waiting(d: dict[str, Any], msgs: list[str], hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline) -> None:
    # vLLM's message names compilation as a cause it prints this during: a check to make where the log shows a compile
    # or a capture running, not otherwise.
    if tl.last_phase == "capturing" or tl.capture is not None:
        d["compile_action"] = ("A compile or CUDA-graph capture was running: give it time; if it repeats for many "
                               "minutes, rerun with --enforce-eager to rule them out")


_DERIVE = {
    "engine_waiting": _waiting,
    "address_in_use": _address_in_use,
    "stale_max_model_len": _stale,
    "kv_cache_insufficient": _kv_insufficient,
    "cuda_oom": _cuda_oom,
    "engine_core_failed": _engine_core_failed,
    "free_memory_below_utilization": _free_memory,
    "worker_died": _worker_died,
    **derive_v034.DERIVE,
}
