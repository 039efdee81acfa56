"""The answer of fit-length: `FitResult`, for people (render.fit) and machines (`to_json`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.logs.facts import LogCalibration
from dsv4ctl.planning.checkpoint.geometry import Dsv4Geometry
from dsv4ctl.planning.mirror.kv_specs import DSV4_BLOCK_SIZE, KvLayoutChoice
from dsv4ctl.planning.mirror.measured import ESTIMATE, SizingMode, has_measured_mode
from dsv4ctl.planning.mirror.versions import VersionChoice, choose_vllm_version
from dsv4ctl.planning.plan.memory import GpuMemoryPrediction, KvMemoryEstimate
from dsv4ctl.planning.plan.request import FitRequest
from dsv4ctl.planning.plan.safe_length import SafeLength

# DeepSeek-V4 "Think Max" reasoning mode wants at least this much context.
THINK_MAX_CONTEXT = 393_216


@dataclass(frozen=True)
class WhatIfRow:
    max_num_batched_tokens: int
    max_in_flight_tokens: int
    autofit_max_model_len: int  # 0 = not one token
    full_context_kv_memory_bytes: int  # `--kv-cache-memory-bytes` the model maximum needs
    current: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_in_flight_tokens": self.max_in_flight_tokens,
            "autofit_max_model_len": self.autofit_max_model_len,
            "full_context_kv_memory_bytes": self.full_context_kv_memory_bytes,
            "current": self.current,
        }


@dataclass(frozen=True)
class FitResult:
    """The answer, for people (render.fit) and machines (`to_json`)."""

    geometry: Dsv4Geometry
    request: FitRequest
    verdict: str  # "fits" | "shrinks" | "does_not_fit"
    refusal: str | None  # vLLM's error text when it would refuse
    model_max_model_len: int
    autofit_max_model_len: int  # 0 when not even one token fits
    will_shrink: bool
    shrink_tokens: int
    requested_max_model_len: int | None  # the explicit length checked, if one was given
    recommended_max_model_len: int  # 0 when no length survives the margin
    kv_cache_memory_bytes: int  # per GPU, the limiting worker's (before the null block)
    kv_cache_memory_source: str  # "given" | "predicted" | "log"
    margin_bytes: int
    bytes_per_block: int
    blocks_per_request: int  # at the auto-fit length
    num_blocks: int
    full_context_kv_memory_bytes: int
    max_num_batched_tokens: int
    max_num_batched_tokens_source: str
    max_num_seqs: int
    async_scheduling: bool
    max_in_flight_tokens: int
    layout: KvLayoutChoice
    num_kv_cache_groups: int
    num_kv_layers: int
    gpus: tuple[GpuMemoryPrediction, ...]
    log: LogCalibration | None
    what_if: tuple[WhatIfRow, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    vllm_flags: tuple[str, ...]
    version: VersionChoice = field(default_factory=lambda: choose_vllm_version())
    nodes: tuple[dict[str, Any], ...] = ()  # one entry per --gpus snapshot when several were given
    alternatives: tuple[Any, ...] = ()  # what would fit when this does not (planning/plan/alternatives.py)
    visible_gpus: int | None = None  # whole GPUs the snapshot showed (None: no GPUs read)
    available_kv: KvMemoryEstimate | None = None  # the limiting GPU's KV memory: value, range, basis, terms
    autofit_range: tuple[int, int] | None = None  # auto-fit at the range's low and high ends
    why: str = ""  # the decision in one sentence (fit.py `_decide`): what every line and the exit code follow
    requested_spare_bytes: int | None = None  # the KV memory the length asked for leaves unused, where it fits
    sizing: SizingMode | None = None  # how the release sizes the KV cache for this launch (0.34+: measured or estimate)
    engram_host: Any = None  # DeepSeek-V4.1: the Engram tables' host memory (planning/plan/engram.py EngramHostPlan)
    block_size: int | None = None  # the KV block size planned, where it is not DeepSeek-V4's 256

    @property
    def tightest_gpu(self) -> GpuMemoryPrediction | None:
        """The GPU with the least predicted KV memory (the one that limits the plan)."""
        return min(self.gpus, key=lambda g: g.available_kv_bytes) if self.gpus else None
    safe_length: SafeLength | None = None  # the recommendation explained (dsv4ctl.planning.plan.safe_length)

    @property
    def fits(self) -> bool:
        return self.verdict != "does_not_fit"

    @property
    def vllm_version_planned(self) -> str:
        return self.version.planned

    @property
    def mirrored_vllm_version(self) -> str:
        return self.version.planned

    @property
    def think_max_ok(self) -> bool:
        return self.recommended_max_model_len >= THINK_MAX_CONTEXT

    def vllm_command(self) -> str | None:
        """The `vllm serve` line of this plan; None when vLLM would refuse it (no command that cannot run)."""
        if not self.fits:
            return None
        return " ".join(["vllm", "serve", shell_quote(self.geometry.model), *(shell_quote(f) for f in self.vllm_flags)])

    @property
    def has_sizing_modes(self) -> bool:
        """Whether the planned release has two ways to size the KV cache (0.34+), so the plan names its own."""
        return self.sizing is not None and has_measured_mode(self.sizing.release)

    def sizing_json(self) -> dict[str, Any]:
        """The sizing mode, why, the utilization it resolves, and the basis of the KV budget this plan rests on."""
        doc = self.sizing.to_json() if self.sizing else {"mode": ESTIMATE, "why": None, "gpu_memory_utilization":
                                                            self.request.gpu_memory_utilization,
                                                            "gpu_memory_utilization_given": True}
        doc["budget_basis"] = self.available_kv.basis if self.available_kv else None
        return doc

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.geometry.model,
            "verdict": self.verdict,
            "fits": self.fits,
            "why": self.why,
            "refusal": self.refusal,
            "model_max_model_len": self.model_max_model_len,
            "autofit_max_model_len": self.autofit_max_model_len,
            "will_shrink": self.will_shrink,
            "shrink_tokens": self.shrink_tokens,
            "requested_max_model_len": self.requested_max_model_len,
            "requested_spare_bytes": self.requested_spare_bytes,
            "recommended_max_model_len": self.recommended_max_model_len,
            "think_max_context": THINK_MAX_CONTEXT,
            "think_max_ok": self.think_max_ok,
            "kv_cache_memory_bytes": max(self.kv_cache_memory_bytes, 0),
            # Weights and overhead beyond the budget: how much memory is missing (never a negative KV memory).
            "kv_cache_shortfall_bytes": max(-self.kv_cache_memory_bytes, 0),
            "kv_cache_memory_source": self.kv_cache_memory_source,
            "sizing_mode": self.sizing_json(),
            "margin_bytes": self.margin_bytes,
            "bytes_per_block": self.bytes_per_block,
            "blocks_per_request": self.blocks_per_request,
            "num_blocks": self.num_blocks,
            "full_context_kv_memory_bytes": self.full_context_kv_memory_bytes,
            "block_size": self.block_size or DSV4_BLOCK_SIZE,
            "kv_cache_dtype": self.layout.kv_cache_dtype,
            "attention_class": self.layout.attention_class,
            "num_kv_cache_groups": self.num_kv_cache_groups,
            "num_kv_layers": self.num_kv_layers,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_batched_tokens_source": self.max_num_batched_tokens_source,
            "max_num_seqs": self.max_num_seqs,
            "async_scheduling": self.async_scheduling,
            "max_in_flight_tokens": self.max_in_flight_tokens,
            "tensor_parallel_size": self.request.tensor_parallel_size,
            "pipeline_parallel_size": self.request.pipeline_parallel_size,
            "data_parallel_size": self.request.data_parallel_size,
            "enable_expert_parallel": self.request.enable_expert_parallel,
            "num_speculative_tokens": self.request.num_speculative_tokens,
            "gpu_memory_utilization": self.request.gpu_memory_utilization,
            "gpus": [g.to_json() for g in self.gpus],
            "tightest_gpu": self.tightest_gpu.to_json() if self.tightest_gpu else None,
            "available_kv_bytes": self.available_kv.to_json() if self.available_kv else None,
            "autofit_range": list(self.autofit_range) if self.autofit_range else None,
            "nodes": list(self.nodes),
            "alternatives": [a.to_json() for a in self.alternatives],
            "log": self.log.to_json() if self.log else None,
            "what_if": [row.to_json() for row in self.what_if],
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "vllm_flags": list(self.vllm_flags) if self.fits else [],
            "vllm_command": self.vllm_command(),
            "vllm_version_planned": self.version.planned,
            "vllm_version_source": self.version.source,
            "vllm_version_requested": self.version.requested,
            "mirrored_vllm_version": self.version.planned,
            # A plan vLLM refuses has no safe length: the margin's arithmetic is for a start vLLM would make.
            "safe_length": self.safe_length.to_json() if self.safe_length and self.refusal is None else None,
            "geometry": self.geometry.to_json(),
        } | ({"host_memory": self.engram_host.to_json()} if self.engram_host is not None else {})


def shell_quote(text: str) -> str:
    return text if re.fullmatch(r"[A-Za-z0-9_./:=,@%+-]+", text) else "'" + text.replace("'", "'\\''") + "'"
