"""Available KV-cache memory per GPU, predicted the way vLLM's worker computes it.

vLLM 0.32 (`v1/worker/utils.py:request_memory`, `v1/worker/gpu_worker.py:determine_available_memory`):

    requested  = ceil(cuda_total × gpu_memory_utilization)      # refused if CUDA free at start < requested
    available  = requested − (weights + non-torch + persistent torch allocations)
                           − (torch peak − torch allocated during the profile run)
                           − CUDA-graph memory estimate

CUDA's total is NVML's total minus the driver-reserved memory (`GpuDevice.cuda_total_bytes`), and the
free memory CUDA reports at worker start is NVML's free minus the worker's own CUDA context. Weights
come from the checkpoint (per rank); everything that is neither weights nor KV is one overhead figure,
estimated by default and replaced by the real numbers when a startup log is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dsv4ctl.planning.checkpoint.geometry import CheckpointWeights
from dsv4ctl.planning.mirror.measured import sizing_margin
from dsv4ctl.units import GiB, MiB, format_gib_vllm

# A fresh CUDA context took 552,402,944 bytes on an H200 (driver 580, torch 2.x): vLLM's own process
# sees that much less free memory than NVML reports before it starts. Rounded up.
CUDA_CONTEXT_BYTES = 600 * MiB
# Non-KV, non-weight memory of a DeepSeek-V4 worker: profile-run activation peak (MoE dispatch, indexer
# and sparse-attention prefill workspaces at max_num_batched_tokens), NCCL/cuBLAS/DeepGEMM buffers and
# the CUDA-graph estimate. An estimate; `--from-log` replaces it with the measured figure.
DEFAULT_NON_KV_OVERHEAD_BYTES = 6 * GiB
# Its range. Evidence for the width (../shared/research/vllm-available-kv-memory.md): vllm#54677 reports the same
# DeepSeek-V4-Flash TP4 launch needing ~4 GiB/GPU more non-KV memory on vLLM 0.28.0 than on 0.26.0, so the
# estimate is read as 6 GiB +/- 4 GiB. On unified-memory GPUs the budget itself moves with host memory: the upstream
# stale-length report saw 9.81 GiB available on one start and 12.3 GiB on the next (2.5 GiB), added on both sides.
NON_KV_OVERHEAD_SPREAD_BYTES = 4 * GiB
UNIFIED_MEMORY_SPREAD_BYTES = 5 * GiB // 2
# vLLM 0.34's measured mode keeps max(1 GiB, 0.75 x the transient peak) of the device free below the KV cache
# (mirror/measured.py). The peak is part of the overhead above, its share unknown until a log measures it:
# estimated as half the overhead, anywhere from none of it to all of its high end.
TRANSIENT_PEAK_SHARE = 0.5


@dataclass(frozen=True)
class GpuMemoryPrediction:
    """One GPU's budget, as vLLM's worker on it would compute it."""

    cuda_index: int
    name: str
    pp_rank: int
    total_bytes: int  # NVML total
    cuda_total_bytes: int  # what CUDA/vLLM sees as total
    free_bytes: int  # NVML free
    cuda_free_at_start: int  # NVML free minus the worker's CUDA context
    requested_bytes: int  # ceil(cuda_total × gpu_memory_utilization)
    weights_bytes: int
    overhead_bytes: int
    available_kv_bytes: int
    refusal: str | None  # vLLM's startup error when free memory is below the request
    node: str | None = None  # the node it is on, when several nodes' GPUs are planned together
    engram_bytes: int = 0  # DeepSeek-V4.1 with cpu_offload false: this rank's Engram tables in GPU memory

    def to_json(self) -> dict[str, Any]:
        return {
            "cuda_index": self.cuda_index,
            "name": self.name,
            "pp_rank": self.pp_rank,
            "total_bytes": self.total_bytes,
            "cuda_total_bytes": self.cuda_total_bytes,
            "free_bytes": self.free_bytes,
            "cuda_free_at_start_bytes": self.cuda_free_at_start,
            "requested_bytes": self.requested_bytes,
            "weights_bytes": self.weights_bytes,
            "overhead_bytes": self.overhead_bytes,
            "available_kv_bytes": max(self.available_kv_bytes, 0),
            "kv_shortfall_bytes": max(-self.available_kv_bytes, 0),
            "refusal": self.refusal,
            "node": self.node,
        } | ({"engram_tables_bytes": self.engram_bytes} if self.engram_bytes else {})


def requested_memory(cuda_total_bytes: int, gpu_memory_utilization: float) -> int:
    return math.ceil(cuda_total_bytes * gpu_memory_utilization)


def free_memory_refusal(cuda_index: int, free: int, total: int, util: float, requested: int) -> str:
    """vLLM's `request_memory` error, word for word (0.32)."""
    return (
        f"Free memory on device cuda:{cuda_index} ({format_gib_vllm(free)}/{format_gib_vllm(total)} GiB) on startup is less than desired "
        f"GPU memory utilization ({util}, {format_gib_vllm(requested)} GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes."
    )


def measured_budget(requested: int, cuda_free_at_start: int, transient_peak: int) -> int:
    """What vLLM 0.34's measured mode gives the engine (weights, overhead and KV cache together): the utilization
    budget, capped by the memory free at start less the sizing margin. From `measure_kv_cache_bytes`
    (vllm==0.34.0 v1/worker/extensible_kv_cache.py:592-618) with non_kv = weights + overhead, the peak inside the
    overhead, and torch's reservation growth no larger than the peak (an estimate): available =
    min(requested, free at start - max(1 GiB, 0.75 x peak)) - weights - overhead."""
    return min(requested, cuda_free_at_start - sizing_margin(transient_peak))


@dataclass(frozen=True)
class StartupMemoryCheck:
    """vLLM's `request_memory` on one GPU at worker start: what it asks for and whether it gets it."""

    cuda_free_at_start: int  # NVML free minus the worker's CUDA context
    requested_bytes: int
    refusal: str | None  # vLLM's error text when the free memory is below the request

    @property
    def slack_bytes(self) -> int:
        return self.cuda_free_at_start - self.requested_bytes


def check_startup_memory(device: Any, gpu_memory_utilization: float) -> StartupMemoryCheck:
    """The free-memory check vLLM's worker makes on `device` (a `dsv4ctl.gpu.GpuDevice`) at start."""
    requested = requested_memory(device.cuda_total_bytes, gpu_memory_utilization)
    cuda_free = max(0, device.free_bytes - CUDA_CONTEXT_BYTES)
    refusal = None
    if cuda_free < requested:
        refusal = free_memory_refusal(device.cuda_index, cuda_free, device.cuda_total_bytes, gpu_memory_utilization, requested)
    return StartupMemoryCheck(cuda_free, requested, refusal)


def weights_per_rank(
    weights: CheckpointWeights,
    *,
    tensor_parallel_size: int,
    pipeline_parallel_size: int,
    data_parallel_size: int,
    enable_expert_parallel: bool,
    pp_rank: int,
    load_mtp: bool,
) -> int:
    """Checkpoint bytes one GPU holds: dense layers split over TP×PP, routed experts over EP×PP
    (EP = TP×DP with --enable-expert-parallel, else TP); MTP layers on the last PP stage when used."""
    ep = tensor_parallel_size * (data_parallel_size if enable_expert_parallel else 1)
    per_rank = weights.dense_bytes // (tensor_parallel_size * pipeline_parallel_size)
    per_rank += weights.expert_bytes // (ep * pipeline_parallel_size)
    if load_mtp and pp_rank == pipeline_parallel_size - 1:
        per_rank += weights.mtp_bytes // tensor_parallel_size
    return per_rank


@dataclass(frozen=True)
class KvTerm:
    """One term of the available-KV arithmetic, with its basis and range."""

    name: str  # "requested" | "measured_budget" | "weights" | "engram_tables" | "non_kv_overhead" | "unified_memory_swing" | "kv_cache_memory"
    value: int
    low: int
    high: int
    basis: str  # "exact" (a flag) | "measured" (NVML, a log) | "checkpoint" | "estimated"
    source: str  # where the number comes from, in words

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "low": self.low, "high": self.high, "basis": self.basis,
                "source": self.source}


@dataclass(frozen=True)
class KvMemoryEstimate:
    """Available KV memory per GPU (the limiting GPU) as a value with a range and the basis of its least sure term."""

    value: int
    low: int
    high: int
    basis: str
    terms: tuple[KvTerm, ...]
    narrow: str | None = None  # what would narrow the range (None when it is exact)

    @property
    def width(self) -> int:
        return self.high - self.low

    def to_json(self) -> dict[str, Any]:
        # A range is of memory that exists: clamped at 0 (the shortfall, when the budget is exceeded, is its own figure).
        return {"value": max(self.value, 0), "low": max(self.low, 0), "high": max(self.high, 0), "basis": self.basis,
                "shortfall_bytes": max(-self.value, 0), "terms": [t.to_json() for t in self.terms], "narrow": self.narrow}


_BASIS_ORDER = ("exact", "checkpoint", "measured", "calibrated", "estimated")


def combine_terms(requested: KvTerm, subtracted: list[KvTerm], narrow: str | None) -> KvMemoryEstimate:
    """available = requested − Σ subtracted; low uses every subtracted term's high end."""
    value = requested.value - sum(t.value for t in subtracted)
    low = requested.low - sum(t.high for t in subtracted)
    high = requested.high - sum(t.low for t in subtracted)
    terms = (requested, *subtracted)
    basis = max((t.basis for t in terms), key=_BASIS_ORDER.index)
    return KvMemoryEstimate(value, low, high, basis, terms, narrow if high != low else None)
