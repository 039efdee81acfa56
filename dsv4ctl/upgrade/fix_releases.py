"""Which of dsv4ctl's runtime fixes each vLLM release needs, read from the releases' sources, and whether a launch
takes the code path a fix guards.

`dsv4ctl doctor` and the plugin decide a fix's need from the vLLM installed here (`dsv4ctl.fixes.check`); an
upgrade is planned before the other release is installed, so its need comes from this table: one row per fix and
range of releases, each with what was read and where (docs/fixes.md, the "Need" column, says the same in prose).
A release no row covers is "not recorded": no range is stretched past the releases read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dsv4ctl.fixes.base import DEEPGEMM_METADATA_CLAMP, FIX_NAMES, FLASHMLA_EMPTY_PREFILL_CHUNK, STALE_MAX_MODEL_LEN

NEEDED = "needed"
NOT_NEEDED = "not-needed"
NOT_RECORDED = "not-recorded"


@dataclass(frozen=True)
class NeedRange:
    first: str  # the oldest release of the range (inclusive)
    last: str  # the newest release of the range (inclusive): the newest read, never assumed beyond
    status: str  # NEEDED | NOT_NEEDED
    reason: str  # what the release's code has, in a few words
    where: str  # where it was read: 'vllm==0.31.0 vllm/...py:98-101'


# Read from each release's wheel (vllm-0.27.1 ... vllm-0.34.0); the deepgemm rows from the vendored DeepGEMM header
# (vllm/third_party/deep_gemm/include/deep_gemm/scheduler/sm90_paged_mqa_logits.cuh) of the CUDA wheels.
FIX_RELEASES: dict[str, tuple[NeedRange, ...]] = {
    STALE_MAX_MODEL_LEN: (
        NeedRange("0.27.1", "0.30.0", NEEDED,
                  "ModelState.max_model_len is a plain attribute that update_max_model_len leaves at the old length",
                  "vllm==0.27.1..0.30.0 vllm/v1/worker/gpu/model_states/interface.py (0.30.0 :62)"),
        NeedRange("0.31.0", "0.34.0", NOT_NEEDED,
                  "ModelState.max_model_len is a read-only property over the model config",
                  "vllm==0.31.0..0.34.0 vllm/v1/worker/gpu/model_states/interface.py (0.31.0 :98-100, 0.34.0 :99-101)"),
    ),
    DEEPGEMM_METADATA_CLAMP: (
        NeedRange("0.27.1", "0.27.1", NEEDED,
                  "the vendored DeepGEMM's SM90 metadata kernel has no guard for all-zero context lengths",
                  "vllm==0.27.1 vllm/third_party/deep_gemm/include/deep_gemm/scheduler/sm90_paged_mqa_logits.cuh (DeepGEMM 2.6.1)"),
        NeedRange("0.28.0", "0.34.0", NOT_NEEDED,
                  "the vendored DeepGEMM guards it (`if (total == 0)`, `min(lo, batch_size - 1)`); an older external "
                  "deep_gemm package, imported first, still needs the fix",
                  "vllm==0.28.0..0.34.0 vllm/third_party/deep_gemm/include/deep_gemm/scheduler/sm90_paged_mqa_logits.cuh "
                  "(0.34.0 :102, :126)"),
    ),
    FLASHMLA_EMPTY_PREFILL_CHUNK: (
        NeedRange("0.27.1", "0.34.0", NEEDED,
                  "DeepseekV4FlashMLAAttention._forward_prefill calls the kernel for a chunk with no query rows",
                  "vllm==0.27.1..0.34.0 vllm/models/deepseek_v4/nvidia/flashmla.py (0.33.0 :266, 0.34.0 :262)"),
    ),
}


@dataclass(frozen=True)
class FixNeed:
    """One fix under one release."""

    status: str  # NEEDED | NOT_NEEDED | NOT_RECORDED
    reason: str
    where: str | None

    def to_json(self) -> dict[str, str | None]:
        return {"status": self.status, "reason": self.reason, "where": self.where}


def _key(version: str) -> tuple[int, ...]:
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", version)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else (-1,)


def fix_need(name: str, release: str) -> FixNeed:
    """The need of fix `name` under `release` (a patch release of a range's minor counts in it only when the range
    names that minor's releases: 0.33.1 is in 0.27.1-0.34.0)."""
    key = _key(release)
    for row in FIX_RELEASES.get(name, ()):
        if _key(row.first) <= key <= _key(row.last) or (key[:2] == _key(row.last)[:2] and key >= _key(row.first)):
            return FixNeed(row.status, row.reason, row.where)
    recorded = FIX_RELEASES.get(name, ())
    span = f"{recorded[0].first}-{recorded[-1].last}" if recorded else "none"
    return FixNeed(NOT_RECORDED, f"vLLM {release}'s code was not read for this fix (read: {span})", None)


@dataclass(frozen=True)
class LaunchPath:
    """What a fix's code path asks of the launch: whether this launch takes it (None: the inputs do not say)."""

    applies: bool | None
    why: str


def launch_path(name: str, *, length_auto: bool, attention_backend: str | None,
                compute_capabilities: tuple[tuple[int, int], ...]) -> LaunchPath:
    """Whether this launch takes the code path fix `name` guards, from its flags and its GPUs."""
    sm = {cc[0] for cc in compute_capabilities}
    if name == STALE_MAX_MODEL_LEN:
        if length_auto:
            return LaunchPath(True, "--max-model-len auto: vLLM lowers the length after the model state read it")
        return LaunchPath(False, "an explicit --max-model-len: vLLM never lowers it")
    if name == DEEPGEMM_METADATA_CLAMP:
        if not sm:
            return LaunchPath(None, "SM90 GPUs (H100, H200) only: no GPU given")
        return LaunchPath(9 in sm, "SM90 GPUs (H100, H200) only" + ("" if 9 in sm else ": not these GPUs"))
    if name == FLASHMLA_EMPTY_PREFILL_CHUNK:
        if attention_backend and attention_backend.upper() == "FLASHINFER_MLA_SPARSE_DSV4":
            return LaunchPath(False, "FlashMLA's sparse prefill only: --attention-backend FLASHINFER_MLA_SPARSE_DSV4")
        if sm and sm <= {12}:
            return LaunchPath(False, "FlashMLA's sparse prefill only: SM12x GPUs take FlashInfer's")
        if not sm:
            return LaunchPath(None, "FlashMLA's sparse prefill (the default off SM12x GPUs): no GPU given")
        return LaunchPath(True, "FlashMLA's sparse prefill, the default on these GPUs; an empty chunk comes with "
                          "KV-transfer loads")
    return LaunchPath(None, "")


__all__ = ["FIX_NAMES", "FIX_RELEASES", "FixNeed", "LaunchPath", "NEEDED", "NOT_NEEDED", "NOT_RECORDED", "NeedRange",
           "fix_need", "launch_path"]
