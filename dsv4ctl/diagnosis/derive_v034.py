"""The numbers and words of the findings vLLM 0.34 brought: the measured KV cache's refusals and auto-fit, the V1
runner's switch refused, o_groups against the tensor-parallel size, and the DSpark traps (`catalogue.signatures_v034`,
`catalogue.signatures_dspark`). `derive.derive` calls these by signature id; each reads the log only."""

from __future__ import annotations

import re
from typing import Any, Callable

from dsv4ctl.catalogue.signatures import BY_ID
from dsv4ctl.diagnosis.analyzer import Hit, StartAnalyzer
from dsv4ctl.diagnosis.evidence import command_parts, line_of, make_finding
from dsv4ctl.diagnosis.model import Finding
from dsv4ctl.logs import deployment
from dsv4ctl.logs.timeline import StartupTimeline
from dsv4ctl.logs.timeline_model import MEASURED_FROM, release
from dsv4ctl.logs.timeline_sizing import AFTER_CAPTURE_HINT
from dsv4ctl.units import format_tokens

Details = dict[str, Any]
# The after-warmup auto-fit's refusal (vllm==0.34.0 v1/core/kv_cache_planning.py:1428-1431).
_NO_MEMORY_AFTER_WARMUP = "CUDA graph capture and warmup left no memory for the KV cache"


def tentative_text(tl: StartupTimeline) -> str:
    """What the measured mode's first fit said, when the fit that stands differs from it."""
    t, af = tl.tentative_autofit, tl.autofit
    if t is None or af is None or (t.from_len, t.to_len) == (af.from_len, af.to_len):
        return ""
    first = (f"kept the full {format_tokens(t.from_len)}" if t.from_len == t.to_len
             else f"lowered it from {format_tokens(t.from_len)} to {format_tokens(t.to_len)}")
    mem = f" with {t.memory_text} reserved" if t.memory_text else ""
    return (f" This is vLLM 0.34's measured KV cache: the tentative fit before CUDA-graph capture {first}{mem}; the "
            "length above was fitted again to the blocks measured after capture and warmup.")


def after_capture(text: str) -> bool:
    """The refusal came after CUDA-graph capture and warmup (vLLM 0.34's measured KV cache)."""
    return AFTER_CAPTURE_HINT in text or _NO_MEMORY_AFTER_WARMUP in text


def kv_refusal(d: Details, text: str, tl: StartupTimeline) -> None:
    """`kv_cache_insufficient`'s words: when the memory was found short, what was measured, and where more memory is."""
    d["when_text"], d["measured_text"] = "After loading weights and profiling", ""
    util = (tl.serve_args or {}).get("gpu_memory_utilization")
    r = release(tl.vllm_version)
    measured_default = r is not None and r >= MEASURED_FROM and tl.sizing_mode_known != "estimate"
    if util is None and measured_default:
        # vllm==0.34.0 vllm/config/cache.py:495-501: unset, 1.0 with the extensible KV cache, 0.92 without.
        d["more_memory_text"] = ("more GPUs (tensor/pipeline parallel); this launch leaves --gpu-memory-utilization unset, "
                                 "which is 1.0 with vLLM 0.34's measured KV cache (0.92 without it): memory something "
                                 "else holds on the GPU is what it cannot have (nvidia-smi)")
    if not after_capture(text):
        return
    d["when_text"] = "After CUDA-graph capture and warmup (vLLM 0.34's measured KV cache)"
    if _NO_MEMORY_AFTER_WARMUP in text:
        parts = [" Auto-fit ran again on what vLLM measured after capture and found no memory left for the KV cache."]
    else:
        parts = [" The length passed the check against the tentative plan's reservation before capture; the blocks "
                 "vLLM measured after it are what it was checked against again."]
    least = tl.measured
    if least is not None:
        others = [b for b in tl.measured_per_worker if b.blocks > least.blocks]
        where = f" on {least.worker}" if len(tl.measured_per_worker) > 1 else ""
        parts.append(f" The least a worker measured: {least.blocks:,} blocks ({least.gib} GiB){where}")
        if others:
            most = max(others, key=lambda b: b.blocks)
            parts.append(f"; the most {most.blocks:,} ({most.gib} GiB) on {most.worker}")
        parts.append(".")
        d.update(measured_blocks=least.blocks, measured_gib=least.gib, measured_worker=least.worker)
    if tl.graph_capture_gib is not None:
        d["graphs_action"] = (f"CUDA graphs took {tl.graph_capture_gib} GiB of it here: fewer or smaller capture sizes "
                              "leave the KV cache more (vLLM's own advice; --compilation-config's "
                              "cudagraph_capture_sizes / max_cudagraph_capture_size)")
    cap = tl.utilization_cap
    if cap is not None:
        utilization, _, withheld = cap
        avail = d.get("available_gib")
        more = f"{avail + withheld:.2f}" if isinstance(avail, (int, float)) else None
        fits = ""
        if more is not None and isinstance(d.get("needed_gib"), (int, float)) and avail + withheld >= d["needed_gib"]:
            fits = f", more than the {d['needed_gib']} GiB needed"
        d["more_memory_text"] = (
            f"leave --gpu-memory-utilization unset (1.0 in this mode): this launch's {utilization} kept {withheld} GiB of "
            "free memory out of the KV cache (vLLM's warning in this log)"
            + (f"; without it the KV cache gets about {avail} + {withheld} = {more} GiB or more{fits}" if more else ""))
    elif isinstance(util, (int, float)) and util < 1.0:
        d["more_memory_text"] = (f"a higher --gpu-memory-utilization (this launch: {util}; 1.0, the default of the "
                                 "measured mode, gives the KV cache all memory left after the model, CUDA graphs and "
                                 "warmup)")
    else:
        d["more_memory_text"] = ("more GPUs (tensor/pipeline parallel), or GPUs with more memory: the measured KV cache "
                                 "already takes all memory left after the model, CUDA graphs and warmup (vLLM's message "
                                 "says so)")
    d["measured_text"] = "".join(parts)


# --------------------------------------------------------------------------------------------- the new refusals
def _record_text(hits: list[Hit], a: StartAnalyzer) -> str:
    """The error's own message of the record the hits are in (a frame line's exception)."""
    for h in hits:
        record = next((r for r in a.records if r.spans(h.line)), None)
        if record is not None:
            return " ".join([record.text, *(e.message for e in record.exceptions if getattr(e, "message", None))])
    return ""


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def o_groups(d: Details, msgs: list[str], hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline) -> None:
    """o_groups and the tensor-parallel size, from the assertion's own numbers (else the launch's TP)."""
    text = _record_text(hits, a)
    m = re.search(r"([0-9]+) is not divisible by ([0-9]+)", text)
    groups = int(m.group(1)) if m else None
    tp = int(m.group(2)) if m else tl.tensor_parallel_size
    d.update(groups=groups if groups is not None else "o_groups", tp=tp if tp is not None else "this")
    if groups is None:
        d["divide_action"] = "Use a --tensor-parallel-size that divides the checkpoint's o_groups (config.json)"
        return
    ok = [k for k in _divisors(groups) if tp is None or k < tp] or _divisors(groups)
    d["divide_action"] = (f"Use a --tensor-parallel-size that divides o_groups = {groups}: "
                          f"{', '.join(str(k) for k in _divisors(groups))}")
    if tl.model and tp:
        new_tp = ok[-1]
        dp = (tl.data_parallel_size or 1) * (tp // new_tp) if tp % new_tp == 0 else None
        changes: dict[str, Any] = {"tensor_parallel_size": new_tp}
        if dp and dp > 1:
            changes.update(data_parallel_size=dp, enable_expert_parallel=True)
        flags = "".join(" " + t for k, v in changes.items() for t in deployment.flag_tokens(k, v))
        keep = d.get("_serve_no_split", "")
        reach = ", the other GPUs as data-parallel replicas with expert parallelism" if dp and dp > 1 else ""
        if not d.get("model"):
            return  # an earlier start: no command is shown
        d["divide_command"] = (f"For example --tensor-parallel-size {new_tp}{reach}: vllm serve "
                               f"{deployment.model_arg(tl)}{keep}{flags}")


def extensible_off(d: Details, msgs: list[str], hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline) -> None:
    reason = d.get("reason") or tl.extensible_off_reason
    if "IMEX" in " ".join(msgs):
        d["reason_text"] = ("vLLM left its measured KV cache off: without an IMEX channel, KV transfers within a host "
                            "(e.g. NIXL) would lose NVLink; with transfers only across hosts, --enable-extensible-kv-cache "
                            "turns it on (vLLM's advice).")
    else:
        d["reason_text"] = f"vLLM turned its measured KV cache off on every worker: {reason}."


# --------------------------------------------------------------------------------------------------- DSpark
def _is_v41(tl: StartupTimeline) -> bool:
    text = " ".join(x for x in (tl.architecture, tl.model) if x).lower()
    return "deepseekv41" in text or "deepseek-v4.1" in text or "deepseek_v41" in text


def dspark(d: Details, msgs: list[str], hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline) -> None:
    """Whether this start runs DSpark (its flags or engine config say), as a fact or a check to make."""
    if "line" not in d and (m := re.search(r"host\.h:([0-9]+)", " ".join(msgs))):
        d["line"] = m.group(1)  # FlashMLA's assertion, when the first line is its "Failed to create tensormap"
    method = tl.speculative_method
    no_spec = f"vllm serve {deployment.model_arg(tl)}{d['_serve_no_spec']}" if tl.model and "_serve_no_spec" in d else None
    if method == "dspark":
        d["spec_text"] = " This start runs DSpark (its speculative config says method 'dspark')."
        d["spec_check"] = ("Check whether the failure follows DSpark: the same launch without --speculative-config"
                           + (f": {no_spec}" if no_spec else ""))
    elif method is not None:
        d["spec_text"] = f" This start's speculative method is {method!r}, not DSpark: the reports' condition differs."
    elif tl.serve_args or "engine_config" in tl.refs:
        d["spec_text"] = " This start's flags show no speculative decoding: the reports' DSpark condition differs."
    else:
        d["spec_text"] = " The log does not show this start's flags: check whether it ran DSpark (--speculative-config)."
        d["spec_check"] = "Check the launch's --speculative-config: the reports ran DSpark ('method': 'dspark')"
    r = release(tl.vllm_version)
    if r is not None and r < MEASURED_FROM:
        d["release_check"] = (f"This is vLLM {tl.vllm_version}: in 0.34.0 DeepSeek-V4.1's map_draft_to_target returns the "
                              "draft ids unchanged; compare a start on 0.34.0")


def ascend_index(d: Details, msgs: list[str], hits: list[Hit], a: StartAnalyzer, tl: StartupTimeline) -> None:
    dspark(d, msgs, hits, a, tl)
    text = " ".join(msgs)
    m = re.search(r"index value ([0-9]+) exceeds bounds ([0-9]+)", text)
    d.setdefault("index", m.group(1) if m else "?")
    d.setdefault("bound", m.group(2) if m else "?")
    if not m:
        d["numbers_text"] = ""
        return
    index = int(m.group(1))
    near_one = abs(index - 0x3F800000) < 0x10000  # the bit pattern of the float 1.0
    d["numbers_text"] = (f" (index {index:,}, bound {int(m.group(2)):,}"
                         + (f"; {index} is 0x{index:08X}, next to the bit pattern of the float 1.0, 0x3F800000: it "
                            "looks like a float read as an index" if near_one else "") + ")")


# How much less one worker may measure than the most before the note: the granule rounding and the transient peak
# differ by a few blocks between ranks; a tenth is a GPU with less memory free.
UNEVEN = 0.9


def measured_notes(tl: StartupTimeline, log: str) -> list[Finding]:
    """A worker that measured much less than the others (vLLM 0.34's measured KV cache takes the least over ranks)."""
    least, workers = tl.measured, tl.measured_per_worker
    if least is None or len(workers) < 2:
        return []
    low = min(workers, key=lambda b: b.blocks)
    most = max(workers, key=lambda b: b.blocks)
    if low.blocks >= UNEVEN * most.blocks:
        return []
    length = f" and the length ({format_tokens(tl.autofit.to_len)})" if tl.autofit is not None else ""
    details = {"least_worker": low.worker, "least_blocks": low.blocks, "least_gib": low.gib, "least_free": low.free_gib,
               "most_blocks": most.blocks, "most_gib": most.gib, "most_free": most.free_gib, "length_text": length}
    extra = [line_of(b.ref) for b in (low, most) if b.ref is not None]
    return [make_finding(BY_ID["measured_kv_uneven"], [], details, extra=extra)]


def dspark_notes(tl: StartupTimeline, findings: list[Finding], log: str) -> list[Finding]:
    """The DSpark trap a failure of this start matches by its conditions (not its text): DeepSeek-V4.1 with DSpark and
    an illegal memory access (vllm#56771)."""
    if not (tl.speculative_method == "dspark" and _is_v41(tl)):
        return []
    if not any(f.id == "cuda_illegal_memory_access" for f in findings):
        return []
    details = command_parts(tl, log)
    ref = tl.refs.get("engine_config") or tl.refs.get("nondefault_args")
    return [make_finding(BY_ID["dspark_v41_long_prompt_ima"], [], details, extra=[line_of(ref)] if ref else [])]


DERIVE: dict[str, Callable[[Details, list[str], list[Hit], StartAnalyzer, StartupTimeline], None]] = {
    "dsv4_o_groups_tp": o_groups,
    "extensible_kv_cache_disabled": extensible_off,
    "dspark_flashmla_tensormap": dspark,
    "dspark_map_draft_to_target": dspark,
    "ascend_index_check_dspark": ascend_index,
}
