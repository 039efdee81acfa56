"""How a start sized its KV cache and fitted its length: auto-fit's lines (every release) and vLLM 0.34's measured
("extensible") KV cache, read into the timeline.

vLLM 0.34.0 sizes the KV cache twice when the extensible cache is on (its default on CUDA and ROCm): a tentative plan
against a reservation ("Available KV cache memory" is then that reservation, not the KV size), then, after warmup and
CUDA-graph capture, the blocks that fit in the memory measured, and auto-fit runs again on them. Each text below is
vLLM's format string, cited file:line in vllm==0.34.0 (`/work/wheels/src/vllm-0.34.0`) unless said:

- tentative reduction, v1/core/kv_cache_planning.py:1478-1485 "Auto-fit max_model_len: reduced from %d to %d to fit in
  available KV cache memory (%s)%s", the note :1451-1455 "; the final length is set after CUDA graph capture and warmup"
  (without the note it is 0.27-0.33's only reduction line, vllm==0.33.0 kv_cache_planning.py:1404-1409);
- tentative full fit, :1466-1471 "Auto-fit max_model_len: full model context length %d fits in available KV cache
  memory (%s)%s" (0.33: :1395-1399, no note);
- after warm-up, the length kept, :1458-1463 "Auto-fit max_model_len: using max_model_len=%d, which fits in the KV cache
  memory left after CUDA graph capture and warmup (%s).";
- a reduction that is final, :1494-1499 INFO "--max-model-len auto reduced max_model_len from %d to %d (%s)." and
  below AUTO_FIT_SHORT_MAX_MODEL_LEN = 8192 (:61) :1506-1514 WARNING "... (%s). Requests longer than %d tokens will be
  rejected. %s"; the `%s` is "X GiB GPU left for the KV cache after CUDA graph capture and warmup" after warm-up and
  "X GiB GPU available for the KV cache" in the estimate mode (:1488-1492). In a measured start its "from" is the
  tentative length (the model config's length the tentative fit had set, :1403, :1875-1890);
- per worker, v1/worker/extensible_kv_cache.py:693-706 "Memory after warmup: %s GiB free, %s GiB committed to the KV
  cache, %s GiB kept for transient activations (%s GiB allocated at peak, %s GiB of torch reservation growth); %d KV
  cache blocks (%s GiB) fit within the requested %s GiB. Torch may reserve up to %s GiB." (before the minimum over
  ranks, kv_cache_planning.py:1881-1882);
- the committed size, extensible_kv_cache.py:536-540 "Extended KV cache to %d blocks (%.2f GiB)." and before it
  :525-529 "Remapping the KV cache from %d to %d blocks to fit the measured budget.";
- the mode turned off: v1/executor/abstract.py:175-179 "Disabling the extensible KV cache: %s. The KV cache will be
  sized from profiling estimates instead of measured memory."; config/vllm.py:3256-3261 "Extensible KV cache off:
  without an IMEX channel, KV transfers within a host (e.g. NIXL) would lose NVLink and fall back to RDMA or TCP. ...";
- an explicit utilization in (0.7, 1.0) that withholds 1 GiB or more, extensible_kv_cache.py:662-676
  "gpu_memory_utilization=%s caps this instance at %s GiB, keeping %s GiB of free device memory out of the KV cache."

Every regex holds a prefilter keyword (`dsv4ctl.logs.prefilter`) literally.
"""

from __future__ import annotations

import re
from typing import Callable

from dsv4ctl import re_cache
from dsv4ctl.logs.reader import LogLine
from dsv4ctl.logs.timeline_model import (
    MEASURED_FROM,
    AutoFit,
    LineRef,
    MeasuredBlocks,
    ProgressEvent,
    StartupTimeline,
    release,
)
from dsv4ctl.units import format_tokens

# The note vLLM 0.34 adds to the auto-fit lines of the tentative plan (v1/core/kv_cache_planning.py:1452).
TENTATIVE_NOTE = "the final length is set after CUDA graph capture and warmup"
# What the final reduction's memory says after warm-up (kv_cache_planning.py:1489), and the after-capture hint of
# `_more_kv_cache_memory_hint` (:74) that the refusals then carry.
AFTER_WARMUP = "left for the KV cache after CUDA graph capture and warmup"
AFTER_CAPTURE_HINT = "the model, its activations, CUDA graphs and warmup"

_NUM = r"(-?[0-9]+(?:\.[0-9]+)?)"
RE = {
    "autofit": re_cache.compile(r"max_model_len: reduced from ([0-9,]+) to ([0-9,]+)(.*)"),
    "autofit_full": re_cache.compile(r"Auto-fit max_model_len: full model context length ([0-9,]+) fits(.*)"),
    "autofit_kept": re_cache.compile(
        r"Auto-fit max_model_len: using max_model_len=([0-9]+), which fits in the KV cache memory left after CUDA graph "
        r"capture and warmup \(([^)]*)\)"),
    "autofit_final": re_cache.compile(r"-max-model-len auto reduced max_model_len from ([0-9]+) to ([0-9]+) \(([^)]*)\)"),
    "after_warmup": re_cache.compile(
        r"Memory after warmup: " + _NUM + r" GiB free, " + _NUM + r" GiB committed to the KV cache, .*?; ([0-9]+) KV cache "
        r"blocks \(" + _NUM + r" GiB\) fit within the requested " + _NUM + r" GiB"),
    "extended": re_cache.compile(r"Extended KV cache to ([0-9]+) blocks \(" + _NUM + r" GiB\)"),
    "remapped": re_cache.compile(r"Remapping the KV cache from ([0-9]+) to ([0-9]+) blocks"),
    "disabled": re_cache.compile(r"Disabling the extensible KV cache: (.*?)\. The KV cache will be sized"),
    "off_imex": re_cache.compile(r"Extensible KV cache off: without an IMEX channel"),
    "util_caps": re_cache.compile(r"_utilization=([0-9.]+) caps this instance at " + _NUM + r" GiB, keeping " + _NUM
                                  + r" GiB of free device memory out of the KV cache"),
}

def runner_of_release(version: str | None) -> str | None:
    """"V2" for a release without the V1 runner (0.34+), None where the release alone does not say."""
    r = release(version)
    return "V2" if r is not None and r >= MEASURED_FROM else None


Event = Callable[[str, str, LogLine], ProgressEvent]
Ref = Callable[..., LineRef]


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _memory(text: str | None) -> tuple[str | None, float | None]:
    """The memory an auto-fit line names ("9.81 GiB GPU", "9.81 GiB GPU left for the KV cache ...") and its GiB."""
    if not text:
        return None, None
    m = re.search(r"(-?[0-9]+(?:\.[0-9]+)?)\s*GiB", text)
    return text.strip(), (float(m.group(1)) if m else None)


def wants(msg: str) -> bool:
    """Whether the line can hold one of this module's texts (most lines hold none)."""
    return ("max_model_len" in msg or "max-model-len auto" in msg or "extensible KV cache" in msg
            or "Extensible KV cache" in msg or "KV cache blocks" in msg or "KV cache to" in msg
            or "Remapping the KV cache" in msg or "caps this instance" in msg)


def read_sizing(tl: StartupTimeline, msg: str, line: LogLine, ref: Ref, event: Event, events: list[ProgressEvent]) -> None:
    """Auto-fit's lines and the measured KV cache's lines, into the timeline."""
    if "max_model_len: reduced from" in msg:
        _tentative_or_old(tl, msg, line, ref, event, events)
    if "Auto-fit max_model_len: full model context length" in msg:
        _full_fit(tl, msg, line, ref, event, events)
    if "Auto-fit max_model_len: using max_model_len=" in msg:
        _kept(tl, msg, line, ref, event, events)
    if "max-model-len auto reduced max_model_len" in msg:
        _final(tl, msg, line, ref, event, events)
    if "Memory after warmup" in msg or "Extended KV cache to" in msg or "Remapping the KV cache" in msg:
        _measured(tl, msg, line, ref, event, events)
    if "xtensible KV cache" in msg or "caps this instance" in msg:
        _mode(tl, msg, line, ref)


def _tentative_or_old(tl: StartupTimeline, msg: str, line: LogLine, ref: Ref, event: Event,
                      events: list[ProgressEvent]) -> None:
    m = RE["autofit"].search(msg)
    if not m:
        return
    rest = m.group(3)
    mem = re.search(r"\(([^)]*GiB[^)]*)\)", rest)
    memory_text, memory_gib = _memory(mem.group(1) if mem else None)
    tentative = TENTATIVE_NOTE in rest
    fit = AutoFit(from_len=_int(m.group(1)), to_len=_int(m.group(2)), memory_text=memory_text, memory_gib=memory_gib,
                  ref=ref("tentative_autofit" if tentative else "autofit", line))
    tl.max_model_len = fit.from_len
    tl.effective_max_model_len = fit.to_len
    note = f" ({fit.memory_gib:.2f} GiB)" if fit.memory_gib is not None else ""
    if tentative:
        tl.tentative_autofit = fit
        tl.sizing_mode = "measured"
        text = (f"KV cache: auto-fit reduced {format_tokens(fit.from_len)} → {format_tokens(fit.to_len)}{note}, "
                "tentative until CUDA graph capture and warmup")
    else:
        tl.autofit = fit
        text = f"KV cache: auto-fit reduced {format_tokens(fit.from_len)} → {format_tokens(fit.to_len)}{note}"
    events.append(event("kv_cache", text, line))


def _full_fit(tl: StartupTimeline, msg: str, line: LogLine, ref: Ref, event: Event, events: list[ProgressEvent]) -> None:
    m = RE["autofit_full"].search(msg)
    if not m:
        return
    tl.max_model_len = _int(m.group(1))
    tl.effective_max_model_len = tl.max_model_len
    if TENTATIVE_NOTE in m.group(2):
        mem = re.search(r"\(([^)]*GiB[^)]*)\)", m.group(2))
        memory_text, memory_gib = _memory(mem.group(1) if mem else None)
        tl.tentative_autofit = AutoFit(tl.max_model_len, tl.max_model_len, memory_text, memory_gib,
                                       ref=ref("tentative_autofit", line))
        tl.sizing_mode = "measured"
        events.append(event("kv_cache", f"KV cache: full context {format_tokens(tl.max_model_len)} fits, tentative until "
                                        "CUDA graph capture and warmup", line))
        return
    tl.autofit_full_fit = True
    ref("autofit_full", line)
    events.append(event("kv_cache", f"KV cache: full context {format_tokens(tl.max_model_len)} fits", line))


def _kept(tl: StartupTimeline, msg: str, line: LogLine, ref: Ref, event: Event, events: list[ProgressEvent]) -> None:
    """After warm-up the tentative length still fits: it is final. A tentative reduction stands as the reduction; a
    tentative full fit as the full fit."""
    m = RE["autofit_kept"].search(msg)
    if not m:
        return
    kept = int(m.group(1))
    tl.sizing_mode = "measured"
    tl.autofit_final_ref = ref("autofit_final", line)
    tl.effective_max_model_len = kept
    tentative = tl.tentative_autofit
    if tentative is not None and tentative.to_len == kept and tentative.from_len > kept:
        tl.autofit = AutoFit(tentative.from_len, kept, tentative.memory_text, tentative.memory_gib, ref=tentative.ref)
        tl.refs["autofit"] = tentative.ref if tentative.ref is not None else LineRef.of(line)
        text = f"KV cache: auto-fit {format_tokens(tentative.from_len)} → {format_tokens(kept)} kept after warmup"
    else:
        tl.autofit_full_fit = tentative is None or tentative.from_len == kept
        if tl.max_model_len is None:
            tl.max_model_len = kept
        ref("autofit_full", line)
        text = f"KV cache: {format_tokens(kept)} fits after CUDA graph capture and warmup"
    events.append(event("kv_cache", text, line))


def _final(tl: StartupTimeline, msg: str, line: LogLine, ref: Ref, event: Event, events: list[ProgressEvent]) -> None:
    """The reduction that stands: after warm-up in a measured start ("from" is then the tentative length), or the only
    one of an estimated start."""
    m = RE["autofit_final"].search(msg)
    if not m:
        return
    memory_text, memory_gib = _memory(m.group(3))
    fit = AutoFit(from_len=int(m.group(1)), to_len=int(m.group(2)), memory_text=memory_text, memory_gib=memory_gib,
                  ref=ref("autofit", line))
    tl.autofit = fit
    after_warmup = AFTER_WARMUP in m.group(3)
    if after_warmup:
        tl.sizing_mode = "measured"
        tl.autofit_final_ref = ref("autofit_final", line)
    elif tl.sizing_mode is None:
        tl.sizing_mode = "estimate"
    if tl.tentative_autofit is None:
        tl.max_model_len = fit.from_len
    tl.effective_max_model_len = fit.to_len
    note = f" ({fit.memory_gib:.2f} GiB)" if fit.memory_gib is not None else ""
    when = " after CUDA graph capture and warmup" if after_warmup else ""
    events.append(event("kv_cache", f"KV cache: auto-fit reduced {format_tokens(fit.from_len)} → "
                                    f"{format_tokens(fit.to_len)}{note}{when}", line))


def _measured(tl: StartupTimeline, msg: str, line: LogLine, ref: Ref, event: Event, events: list[ProgressEvent]) -> None:
    worker = line.process or f"{line.source}:{line.pid}"
    if "Memory after warmup" in msg and (m := RE["after_warmup"].search(msg)):
        blocks = MeasuredBlocks(worker=worker, blocks=int(m.group(3)), gib=float(m.group(4)),
                                free_gib=float(m.group(1)), requested_gib=float(m.group(5)), ref=LineRef.of(line))
        tl.measured_per_worker.append(blocks)
        tl.sizing_mode = "measured"
        ref("measured_warmup", line, overwrite=False)
        events.append(event("kv_cache", f"KV cache: {blocks.blocks:,} blocks ({blocks.gib:.2f} GiB) fit after warmup "
                                        f"on {worker}", line))
    if "Remapping the KV cache" in msg and (m := RE["remapped"].search(msg)):
        tl.remapped_blocks = (int(m.group(1)), int(m.group(2)))
        ref("remapped", line, overwrite=False)
    if "Extended KV cache to" in msg and (m := RE["extended"].search(msg)):
        blocks, gib = int(m.group(1)), float(m.group(2))
        tl.sizing_mode = "measured"
        if tl.extended is None or blocks < tl.extended.blocks:
            tl.extended = MeasuredBlocks(worker=worker, blocks=blocks, gib=gib, ref=ref("extended", line))
            events.append(event("kv_cache", f"KV cache: extended to {blocks:,} blocks ({gib:.2f} GiB)", line))


def _mode(tl: StartupTimeline, msg: str, line: LogLine, ref: Ref) -> None:
    if "Disabling the extensible KV cache" in msg and (m := RE["disabled"].search(msg)):
        tl.sizing_mode, tl.extensible_off_reason = "estimate", m.group(1)
        ref("extensible_off", line, overwrite=False)
    elif "Extensible KV cache off" in msg and RE["off_imex"].search(msg):
        tl.sizing_mode, tl.extensible_off_reason = "estimate", "no IMEX channel for KV transfers within a host"
        ref("extensible_off", line, overwrite=False)
    if "caps this instance" in msg and (m := RE["util_caps"].search(msg)):
        tl.utilization_cap = (float(m.group(1)), float(m.group(2)), float(m.group(3)))
        tl.sizing_mode = "measured"
        ref("utilization_cap", line, overwrite=False)
