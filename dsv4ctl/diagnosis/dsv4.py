"""DeepSeek-V4 facts the diagnosis uses: the sparse-MLA arithmetic of the stale-length assertion, which vLLM
releases have that bug, and the DeepGEMM kernel of the metadata fault."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from dsv4ctl.logs.timeline import StartupTimeline
from dsv4ctl.units import cdiv, round_up

if TYPE_CHECKING:
    from dsv4ctl.diagnosis.analyzer import Hit

# DeepSeek-V4 constants the arithmetic uses (vllm/models/deepseek_v4/sparse_mla.py):
C128A_COMPRESS_RATIO = 128  # the HCA layers' compress_ratio, whose metadata the assertion checks

C128A_TOPK_ALIGNMENT = 128  # _C128A_TOPK_ALIGNMENT

DSV4_BLOCK_SIZE = 256  # the only KV block size DeepSeek-V4's sparse-MLA kernels accept

def c128a_capacity(reduced_len: int) -> int:
    """C128A top-k capacity the metadata builder allocates for the reduced length."""
    return round_up(cdiv(reduced_len, C128A_COMPRESS_RATIO), C128A_TOPK_ALIGNMENT)

def parse_version(text: str | None) -> tuple[int, int, int] | None:
    if not text:
        return None
    m = re.search(r"([0-9]+)\.([0-9]+)(?:\.([0-9]+))?", text)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)

def stale_bug_status(version: str | None) -> str | None:
    """"affected" (0.29.0-0.30.x), "fixed" (>= 0.31.0), "not_affected" (< 0.29), None if unknown."""
    v = parse_version(version)
    if v is None:
        return None
    if v[:2] < (0, 29):
        return "not_affected"
    if v[:2] <= (0, 30):
        return "affected"
    return "fixed"

def is_dsv4(tl: StartupTimeline) -> bool:
    text = " ".join(x for x in (tl.architecture, tl.model) if x).lower()
    return "deepseekv4" in text or "deepseek-v4" in text or "deepseek_v4" in text or tl.uses_fp8_ds_mla

# The kernel of the DeepGEMM metadata fault. In the DeepGEMM vLLM vendors (vllm==0.27.1 and vllm==0.33.0
# vllm/third_party/deep_gemm/include/deep_gemm/scheduler/sm90_paged_mqa_logits.cuh:11) it is the only function
# of namespace deep_gemm::sched whose name starts "sm90_paged_mqa_lo" (the logits kernel itself is
# sm90_fp8_paged_mqa_logits, outside it), so a name a log cut short ("deep_gemm::sched::sm90_paged_mqa_lo…") is it.
METADATA_KERNEL = "deep_gemm::sched::sm90_paged_mqa_logits_metadata"

METADATA_KERNEL_PREFIX = "deep_gemm::sched::sm90_paged_mqa_lo"

def is_metadata_kernel(kernel: str) -> bool:
    if METADATA_KERNEL in kernel:
        return True
    cut = kernel.rstrip("…")
    return kernel.endswith("…") and cut.startswith(METADATA_KERNEL_PREFIX) and METADATA_KERNEL.startswith(cut)


def full_capture(tl: StartupTimeline, hit: Hit) -> bool:
    if hit.phase != "capturing":
        return False
    if hit.capture_mode:
        return "FULL" in hit.capture_mode.upper()
    return bool(tl.cudagraph_mode and "FULL" in tl.cudagraph_mode)
