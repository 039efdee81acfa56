"""`fit-length`: predict vLLM's KV auto-fit for DeepSeek-V4 and recommend a safe explicit --max-model-len.

`plan_fit(request, snapshot=None, timeline=None, geometry=None) -> FitResult` never prints and never exits. When vLLM
would refuse the settings it *returns* a result whose `fits` is False and whose `refusal` holds vLLM's
own error text (the CLI maps it to exit code 6); it raises `Dsv4ctlError` only for bad inputs.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from dsv4ctl.errors import Dsv4ctlError, GpuUnavailableError, InputError, UsageError
from dsv4ctl.planning.geometry import Dsv4Geometry, load_geometry
from dsv4ctl.planning.kv_planner import (
    KvPlan,
    blocks_per_request,
    needed_bytes,
    plan_kv_cache,
    pp_layer_ranges,
)
from dsv4ctl.planning.kv_specs import DSV4_BLOCK_SIZE, KvLayoutChoice, LayerKvSpec, build_layer_specs, resolve_kv_layout
from dsv4ctl.planning.versions import VersionChoice, choose_vllm_version
from dsv4ctl.planning.memory import (
    DEFAULT_NON_KV_OVERHEAD_BYTES,
    NON_KV_OVERHEAD_SPREAD_BYTES,
    UNIFIED_MEMORY_SPREAD_BYTES,
    KvMemoryEstimate,
    KvTerm,
    combine_terms,
    GpuMemoryPrediction,
    check_startup_memory,
    weights_per_rank,
)
from dsv4ctl.planning.safe_length import MARGIN_FRACTION, MIN_MARGIN_BYTES, SafeLength, safe_length
from dsv4ctl.units import GiB, format_gib, format_tokens, parse_memory_flag, parse_vllm_int

# vLLM 0.32 defaults (config/cache.py, config/scheduler.py, engine/arg_utils.py:get_batch_defaults).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
SCHEDULER_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
BATCHED_DP_DEFAULT_MAX_NUM_BATCHED_TOKENS = 256
# When no GPU is known (given --kv-cache-memory, no snapshot), assume the H100/H200 class DeepSeek-V4 runs on.
ASSUMED_DEVICE_TOTAL_BYTES = 80 * GiB
# Releases that crash in CUDA-graph capture after auto-fit shrank the length (stale max_model_len; fixed in 0.31).
STALE_LENGTH_RELEASES = ("0.29.0", "0.30.0")
# DeepSeek-V4 "Think Max" reasoning mode wants at least this much context.
THINK_MAX_CONTEXT = 393_216
# Recommendation margin: a share of the KV memory, but at least a floor (the one rule: planning/safe_length.py).
DEFAULT_MARGIN_FRACTION = MARGIN_FRACTION
WHAT_IF_BATCHED_TOKENS = (2048, 4096, 8192, 16384)
# Per-GPU sizes above this are typing mistakes (a whole node's figure, or bits for bytes).
MAX_PER_GPU_BYTES = 64 << 40


@dataclass(frozen=True)
class Margin:
    """Headroom kept below the auto-fit ceiling: a fraction of the KV memory or a fixed size."""

    fraction: float | None = DEFAULT_MARGIN_FRACTION
    bytes: int | None = None
    floor_bytes: int = MIN_MARGIN_BYTES

    def resolve(self, kv_memory: int) -> int:
        if self.bytes is not None:
            return self.bytes
        return max(int(kv_memory * (self.fraction or 0.0)), self.floor_bytes)

    def describe(self) -> str:
        if self.bytes is not None:
            return format_gib(self.bytes)
        return f"{(self.fraction or 0) * 100:g}% of KV memory (at least {format_gib(self.floor_bytes)})"


@dataclass(frozen=True)
class FitRequest:
    """What the operator would pass to `vllm serve`; field names are vLLM's EngineArgs names."""

    model: str
    max_model_len: int | None = None  # None or -1: auto
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    kv_cache_dtype: str = "auto"
    block_size: int | None = None  # None: vLLM picks 256 for DeepSeek-V4
    max_num_batched_tokens: int | None = None  # None: vLLM's default for the GPU
    max_num_seqs: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    async_scheduling: bool | None = None  # None: vLLM's default (on for DeepSeek-V4)
    num_speculative_tokens: int = 0  # MTP speculative decoding (0 = off)
    attention_backend: str | None = None
    kv_cache_memory_bytes: int | None = None  # None: predict from the GPUs (or the log)
    # dsv4ctl's own inputs
    margin: Margin = field(default_factory=Margin)
    weights_bytes_per_rank: int | None = None  # overrides the checkpoint's safetensors size
    non_kv_overhead_bytes: int | None = None  # None: estimate (or measured from the log)
    gpus: str | tuple[str, ...] | None = None  # snapshot JSON path(s), one per node; None: NVML when a prediction needs GPUs
    from_log: str | None = None  # a previous startup log of the same model
    vllm_version: str | None = None  # whose planner to mirror; None: installed vLLM, else the log's, else newest known
    enforce_eager: bool = False  # vLLM's --enforce-eager (no CUDA graphs): part of a calibration's configuration
    no_calibration: bool = False  # ignore calibration records (dsv4ctl.planning.calibration)
    # With from_log: take the launch's own flags from the log's `non-default args` for every field not
    # named here (the CLI passes the flags the operator typed), so the plan is that deployment's.
    inherit_from_log: bool = False
    explicit: frozenset[str] = frozenset()

    @property
    def is_auto(self) -> bool:
        return self.max_model_len is None or self.max_model_len == -1


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
class LogCalibration:
    """What a previous startup log says (the lines fit-length reads)."""

    path: str
    available_kv_bytes: int | None
    weights_bytes: int | None
    graph_bytes: int | None
    autofit_from: int | None
    autofit_to: int | None
    max_model_len: int | None
    vllm_version: str | None = None  # the version the log's banner names
    serve_args: dict[str, Any] = field(default_factory=dict)  # the log's `non-default args`
    predicted_from_log: int | None = None  # our auto-fit for the logged memory, to compare with autofit_to
    predicted_range: tuple[int, int] | None = None  # auto-fit across the log's 0.01 GiB rounding interval

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "available_kv_cache_memory_bytes": self.available_kv_bytes,
            "model_loading_bytes": self.weights_bytes,
            "graph_capture_bytes": self.graph_bytes,
            "logged_autofit_from": self.autofit_from,
            "logged_autofit_to": self.autofit_to,
            "logged_max_model_len": self.max_model_len,
            "vllm_version": self.vllm_version,
            "predicted_autofit_for_logged_memory": self.predicted_from_log,
            "predicted_autofit_range": list(self.predicted_range) if self.predicted_range else None,
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
    available_kv: KvMemoryEstimate | None = None  # the limiting GPU's KV memory: value, range, basis, terms
    autofit_range: tuple[int, int] | None = None  # auto-fit at the range's low and high ends

    @property
    def tightest_gpu(self) -> GpuMemoryPrediction | None:
        """The GPU with the least predicted KV memory (the one that limits the plan)."""
        return min(self.gpus, key=lambda g: g.available_kv_bytes) if self.gpus else None
    safe_length: SafeLength | None = None  # the recommendation explained (dsv4ctl.planning.safe_length)

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

    def vllm_command(self) -> str:
        return " ".join(["vllm", "serve", _shell_quote(self.geometry.model), *(_shell_quote(f) for f in self.vllm_flags)])

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.geometry.model,
            "verdict": self.verdict,
            "fits": self.fits,
            "refusal": self.refusal,
            "model_max_model_len": self.model_max_model_len,
            "autofit_max_model_len": self.autofit_max_model_len,
            "will_shrink": self.will_shrink,
            "shrink_tokens": self.shrink_tokens,
            "requested_max_model_len": self.requested_max_model_len,
            "recommended_max_model_len": self.recommended_max_model_len,
            "think_max_context": THINK_MAX_CONTEXT,
            "think_max_ok": self.think_max_ok,
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
            "kv_cache_memory_source": self.kv_cache_memory_source,
            "margin_bytes": self.margin_bytes,
            "bytes_per_block": self.bytes_per_block,
            "blocks_per_request": self.blocks_per_request,
            "num_blocks": self.num_blocks,
            "full_context_kv_memory_bytes": self.full_context_kv_memory_bytes,
            "block_size": DSV4_BLOCK_SIZE,
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
            "log": self.log.to_json() if self.log else None,
            "what_if": [row.to_json() for row in self.what_if],
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "vllm_flags": list(self.vllm_flags),
            "vllm_command": self.vllm_command(),
            "vllm_version_planned": self.version.planned,
            "vllm_version_source": self.version.source,
            "vllm_version_requested": self.version.requested,
            "mirrored_vllm_version": self.version.planned,
            "safe_length": self.safe_length.to_json() if self.safe_length else None,
            "geometry": self.geometry.to_json(),
        }


def _shell_quote(text: str) -> str:
    return text if re.fullmatch(r"[A-Za-z0-9_./:=,@%+-]+", text) else "'" + text.replace("'", "'\\''") + "'"


# --------------------------------------------------------------------------------------------------
# vLLM's scheduling defaults
# --------------------------------------------------------------------------------------------------


def default_batch_limits(device_total_bytes: int | None, device_name: str, *, batched_dp_moe: bool = False) -> tuple[int, int, str]:
    """`EngineArgs.get_batch_defaults` for `vllm serve` (OPENAI_API_SERVER) on CUDA: (mnbt, max_num_seqs, why)."""
    if device_total_bytes is None:
        total, why = ASSUMED_DEVICE_TOTAL_BYTES, "vLLM's default for >=70 GiB GPUs (H100/H200 class; no GPU given)"
    else:
        total, why = device_total_bytes, None
    if total >= 160 * GiB:
        mnbt, seqs, why = 16384, 1024, why or f"vLLM's default for >=160 GiB GPUs ({device_name})"
    elif total >= 70 * GiB and "a100" not in device_name.lower():
        mnbt, seqs, why = 8192, 1024, why or f"vLLM's default for >=70 GiB GPUs ({device_name})"
    else:
        mnbt, seqs, why = 2048, 256, why or f"vLLM's default for smaller GPUs ({device_name})"
    if batched_dp_moe:
        mnbt, why = BATCHED_DP_DEFAULT_MAX_NUM_BATCHED_TOKENS, "vLLM's default for batched DP MoE all2all"
    return mnbt, seqs, why


def max_concurrent_batches(async_scheduling: bool, pipeline_parallel_size: int) -> int:
    """`VllmConfig.max_concurrent_batches` with the V2 model runner (DeepSeek-V4's default since 0.28)."""
    return pipeline_parallel_size + 1 if async_scheduling else pipeline_parallel_size


def parse_max_model_len(text: str) -> int:
    """vLLM's `human_readable_int_or_auto`: `auto`/-1, `1m` (10^6), `1M` (2^20), `25.6k`, plain ints."""
    return parse_vllm_int(text, what="length", allow_auto=True)


def parse_margin(text: str) -> Margin:
    """`10%` (share of KV memory, floor 512 MiB) or a size such as `1GiB`."""
    value = str(text).strip()
    if value.endswith("%"):
        try:
            pct = float(value[:-1])
        except ValueError:
            raise UsageError(f"invalid margin {text!r}", hint="write it like 10% or 1GiB") from None
        if not (0 <= pct < 100) or not math.isfinite(pct):
            raise UsageError(f"invalid margin {text!r}: the percentage must be in [0, 100)")
        return Margin(fraction=pct / 100.0)
    return Margin(fraction=None, bytes=parse_memory_flag(value, what="--margin"))


def parse_speculative_config(text: str) -> int:
    """`--speculative-config '{"method": "mtp", "num_speculative_tokens": N}'` -> N (only MTP is modelled)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        raise UsageError("--speculative-config must be JSON", hint='e.g. \'{"method": "mtp", "num_speculative_tokens": 1}\'') from None
    return speculative_tokens(data)


def speculative_tokens(data: Any) -> int:
    """The MTP draft length of a parsed `--speculative-config` (the dict vLLM's parser makes of it)."""
    if not isinstance(data, dict):
        raise UsageError("--speculative-config must be a JSON object")
    method = data.get("method", "mtp")
    if method not in ("mtp", "deepseek_mtp"):
        raise UsageError(f"--speculative-config method {method!r} is not modelled", hint="fit-length models DeepSeek-V4's own MTP draft layers")
    n = data.get("num_speculative_tokens")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UsageError("--speculative-config needs num_speculative_tokens >= 1")
    return n


# --------------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------------


def _validate(request: FitRequest) -> None:
    def positive(name: str, value: int | None, limit: int) -> None:
        if value is not None and (value < 1 or value > limit):
            raise UsageError(f"--{name.replace('_', '-')} must be between 1 and {limit:,}, got {value}")

    positive("tensor_parallel_size", request.tensor_parallel_size, 4096)
    positive("pipeline_parallel_size", request.pipeline_parallel_size, 1024)
    positive("data_parallel_size", request.data_parallel_size, 65536)
    positive("max_num_batched_tokens", request.max_num_batched_tokens, 1 << 26)
    positive("max_num_seqs", request.max_num_seqs, 1 << 20)
    if not (0 < request.gpu_memory_utilization <= 1) or not math.isfinite(request.gpu_memory_utilization):
        raise UsageError(
            f"--gpu-memory-utilization must be in (0, 1], got {request.gpu_memory_utilization}",
            hint="vLLM takes a fraction of the GPU's memory, e.g. 0.92",
        )
    if request.max_model_len is not None and request.max_model_len != -1 and request.max_model_len < 1:
        raise UsageError(f"--max-model-len must be a positive length or auto, got {request.max_model_len}")
    if request.num_speculative_tokens < 0:
        raise UsageError("num_speculative_tokens must be >= 0")
    if request.kv_cache_memory_bytes is not None:
        if request.kv_cache_memory_bytes <= 0:
            raise UsageError("--kv-cache-memory must be positive", hint="e.g. --kv-cache-memory 9.81GiB")
        if request.kv_cache_memory_bytes > MAX_PER_GPU_BYTES:
            raise UsageError(
                f"--kv-cache-memory {format_gib(request.kv_cache_memory_bytes)} is not a per-GPU figure",
                hint="give the KV memory of one GPU, as vLLM's --kv-cache-memory-bytes takes it",
            )
    for name in ("weights_bytes_per_rank", "non_kv_overhead_bytes"):
        value = getattr(request, name)
        if value is not None and (value < 0 or value > MAX_PER_GPU_BYTES):
            raise UsageError(f"{name.replace('_', ' ')} {value} is out of range")
    margin = _as_margin(request.margin)
    if margin.bytes is not None and margin.bytes > MAX_PER_GPU_BYTES:
        raise UsageError("--margin is larger than any GPU")


def _worker_layer_sets(specs: dict[str, LayerKvSpec], geometry: Dsv4Geometry, pp: int) -> list[set[str]]:
    """Layer names per PP stage (`get_pp_indices`); MTP draft layers live with the last stage."""
    try:
        ranges = pp_layer_ranges(geometry.num_hidden_layers, pp)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if pp > geometry.num_hidden_layers:
        raise UsageError(f"--pipeline-parallel-size {pp} exceeds the model's {geometry.num_hidden_layers} layers")
    sets: list[set[str]] = [set() for _ in range(pp)]
    for name in specs:
        layer_id = int(name.split(".")[2])
        stage = pp - 1
        for rank, (start, end) in enumerate(ranges):
            if start <= layer_id < end:
                stage = rank
                break
        sets[stage].add(name)
    return sets


def _build_specs(geometry: Dsv4Geometry, request: FitRequest, layout: KvLayoutChoice) -> dict[str, LayerKvSpec]:
    mtp_layers = geometry.num_nextn_predict_layers if request.num_speculative_tokens > 0 else 0
    if request.num_speculative_tokens > 0 and mtp_layers == 0:
        raise UsageError(f"{geometry.model} ships no MTP layers (num_nextn_predict_layers = 0)", hint="drop --speculative-config")
    # num_prefill_lookahead_tokens: multi-module MTP reads num_speculative_tokens ahead, else 1 (eagle family).
    if request.num_speculative_tokens > 0:
        multi_module = min(mtp_layers, request.num_speculative_tokens) > 1
        lookahead = request.num_speculative_tokens if multi_module else 1
    else:
        lookahead = 0
    return build_layer_specs(
        geometry.compress_ratios,
        num_mtp_layers=mtp_layers,
        sliding_window=geometry.sliding_window,
        head_dim=geometry.head_dim,
        index_head_dim=geometry.index_head_dim,
        layout=layout,
        block_size=request.block_size or DSV4_BLOCK_SIZE,
        extra_retained_tokens=max(0, lookahead - 1),
    )


def _select_devices(snapshot: Any, request: FitRequest):
    devices = list(snapshot.devices)
    if not devices:
        raise GpuUnavailableError("no GPUs in the snapshot", hint="take the snapshot on the GPU box: dsv4ctl gpus --save snapshot.json")
    whole = [d for d in devices if not d.is_mig]
    if not whole:
        raise GpuUnavailableError(
            "only MIG instances are visible: fit-length plans whole GPUs",
            hint="give the KV memory directly with --kv-cache-memory, or expose whole GPUs via CUDA_VISIBLE_DEVICES",
        )
    need = request.tensor_parallel_size * request.pipeline_parallel_size * request.data_parallel_size
    if len(whole) < need:
        raise GpuUnavailableError(
            f"TP×PP×DP = {need} GPUs needed, {len(whole)} visible",
            hint="lower --tensor-parallel-size/--pipeline-parallel-size/--data-parallel-size or use a snapshot of a bigger box",
        )
    whole.sort(key=lambda d: d.cuda_index)
    return whole[:need]


def _predict_memory(
    devices: list[Any], geometry: Dsv4Geometry, request: FitRequest, overhead: int, weights_override: int | None
) -> tuple[list[GpuMemoryPrediction], list[str]]:
    notes: list[str] = []
    tp, pp = request.tensor_parallel_size, request.pipeline_parallel_size
    predictions = []
    if weights_override is None and geometry.weights is None:
        raise InputError(
            f"cannot predict KV memory for {geometry.model}: the weight size per GPU is unknown",
            hint="pass the checkpoint directory (its safetensors headers give the size), --weights-memory SIZE, "
            "--from-log startup.log, or --kv-cache-memory SIZE",
        )
    for rank, dev in enumerate(devices):
        pp_rank = (rank // tp) % pp
        if weights_override is not None:
            weights = weights_override
        else:
            weights = weights_per_rank(
                geometry.weights,
                tensor_parallel_size=tp,
                pipeline_parallel_size=pp,
                data_parallel_size=request.data_parallel_size,
                enable_expert_parallel=request.enable_expert_parallel,
                pp_rank=pp_rank,
                load_mtp=request.num_speculative_tokens > 0,
            )
        start = check_startup_memory(dev, request.gpu_memory_utilization)
        predictions.append(
            GpuMemoryPrediction(
                cuda_index=dev.cuda_index,
                name=dev.name,
                pp_rank=pp_rank,
                total_bytes=dev.total_bytes,
                cuda_total_bytes=dev.cuda_total_bytes,
                free_bytes=dev.free_bytes,
                cuda_free_at_start=start.cuda_free_at_start,
                requested_bytes=start.requested_bytes,
                weights_bytes=weights,
                overhead_bytes=overhead,
                available_kv_bytes=start.requested_bytes - weights - overhead,
                refusal=start.refusal,
            )
        )
    if any(d.is_unified_memory for d in devices):
        notes.append(
            "unified-memory GPU: free memory swings with the host's page cache; consider --margin 25%"
        )
    return predictions, notes


def _as_margin(value: Any) -> Margin:
    """Library callers may give a Margin, a string (`10%`, `1GiB`), a fraction (0.1) or bytes (int)."""
    if isinstance(value, Margin):
        return value
    if isinstance(value, str):
        return parse_margin(value)
    if isinstance(value, float) and 0 <= value < 1:
        return Margin(fraction=value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return Margin(fraction=None, bytes=value)
    raise UsageError(f"invalid margin {value!r}", hint="write it like 10% or 1GiB")


def _autofit_len(plan: KvPlan) -> int:
    """The length an auto-fit plan ends with; 0 when not even one token fits."""
    return 0 if plan.error else plan.max_model_len


def _full_context_bytes(plan: KvPlan, length: int) -> int:
    """`--kv-cache-memory-bytes` that holds one request of `length` tokens on every worker (plus the null block
    on releases that hold one back)."""
    rules = plan.rules
    return max(
        needed_bytes(w.groups, length, plan.max_in_flight_tokens, rules) + (w.bytes_per_block if rules.null_block else 0)
        for w in plan.workers
    )


def plan_fit(request: FitRequest, snapshot: Any = None, timeline: Any = None, geometry: Dsv4Geometry | None = None) -> FitResult:
    """Mirror vLLM's startup decisions for `request` and recommend an explicit --max-model-len.

    `geometry`: `load_geometry(request.model)` when the caller has read it already."""
    _validate(request)
    if geometry is None:
        geometry = load_geometry(request.model)
    if snapshot is None and isinstance(request.gpus, (tuple, list)):
        if len(request.gpus) > 1:
            return _plan_nodes(request, tuple(request.gpus), timeline, geometry)
        request = replace(request, gpus=request.gpus[0] if request.gpus else None)
    warnings: list[str] = []
    notes: list[str] = []

    # GPUs: needed to predict memory, or to pick vLLM's default max_num_batched_tokens.
    if timeline is not None:
        log_cal: LogCalibration | None = _as_log_calibration(timeline, request.from_log)
    elif request.from_log:
        log_cal = read_log_calibration(request.from_log)
    else:
        log_cal = None
    if log_cal is not None and request.inherit_from_log:
        request, taken = inherit_log_flags(request, log_cal)
        notes.extend(taken)
    if log_cal is not None and request.kv_cache_memory_bytes is None and log_cal.available_kv_bytes is None:
        raise InputError(
            f"{log_cal.path}: no \"Available KV cache memory\" line",
            hint="use the log of a startup that got past memory profiling, or give --kv-cache-memory",
        )
    version = choose_vllm_version(request.vllm_version, log_cal.vllm_version if log_cal is not None else None)
    if version.warning:
        warnings.append(version.warning)
    rules = version.rules
    need_prediction = request.kv_cache_memory_bytes is None and (log_cal is None or log_cal.available_kv_bytes is None)
    if snapshot is None and request.gpus:
        from dsv4ctl.gpu import load_snapshot

        snapshot = load_snapshot(request.gpus)
    if snapshot is None and need_prediction:
        from dsv4ctl.gpu import read_snapshot

        snapshot = read_snapshot()
    devices = _select_devices(snapshot, request) if snapshot is not None else None

    compute_major = devices[0].compute_capability[0] if devices else None
    layout = resolve_kv_layout(request.kv_cache_dtype, request.attention_backend, compute_major)
    specs = _build_specs(geometry, request, layout)

    # Scheduling: max_num_batched_tokens, max_num_seqs, async scheduling.
    batched_dp_moe = False  # needs --all2all-backend deepep_low_latency/nixl_ep, which fit-length does not take
    dev_total = devices[0].total_bytes if devices else None
    dev_name = devices[0].name if devices else ""
    default_mnbt, default_seqs, why = default_batch_limits(dev_total, dev_name, batched_dp_moe=batched_dp_moe)
    model_max = geometry.model_max_model_len
    explicit = None if request.is_auto else request.max_model_len
    length_for_defaults = explicit if explicit is not None else model_max
    max_num_seqs = request.max_num_seqs or default_seqs
    if request.max_num_batched_tokens is not None:
        mnbt, mnbt_source = request.max_num_batched_tokens, "given"
    else:
        mnbt = min(max_num_seqs * length_for_defaults, default_mnbt)
        mnbt_source = why
        if devices is None:
            notes.append(f"--max-num-batched-tokens not given: assumed {mnbt:,}, {why}")
    if request.max_num_seqs is None:
        max_num_seqs = min(max_num_seqs, mnbt)
    async_on = True if request.async_scheduling is None else request.async_scheduling
    in_flight = max_concurrent_batches(async_on, request.pipeline_parallel_size) * mnbt

    # A calibration record of this host and configuration replaces the estimate (planning/calibration.py).
    calibration = None
    if need_prediction and not request.no_calibration and devices:
        from dsv4ctl.planning.calibration import CalibrationKey, find

        calibration = find(CalibrationKey(
            model=str(geometry.config_path or geometry.model), vllm_version=version.planned, gpu_name=devices[0].name,
            cuda_total_bytes=devices[0].cuda_total_bytes, tensor_parallel_size=request.tensor_parallel_size,
            pipeline_parallel_size=request.pipeline_parallel_size, data_parallel_size=request.data_parallel_size,
            enable_expert_parallel=request.enable_expert_parallel, gpu_memory_utilization=float(request.gpu_memory_utilization),
            max_num_batched_tokens=mnbt, max_num_seqs=max_num_seqs, kv_cache_dtype=layout.kv_cache_dtype,
            attention_class=layout.attention_class, num_speculative_tokens=request.num_speculative_tokens,
            enforce_eager=request.enforce_eager,
        ))

    # KV memory per worker.
    gpu_predictions: list[GpuMemoryPrediction] = []
    replica: list[GpuMemoryPrediction] = []  # the binding replica's GPUs (predicted memory only)
    refusal: str | None = None
    pp = request.pipeline_parallel_size
    tp = request.tensor_parallel_size
    if request.kv_cache_memory_bytes is not None:
        source = "given"
        worker_memory = [request.kv_cache_memory_bytes] * (tp * pp)
    elif log_cal is not None and log_cal.available_kv_bytes is not None:
        source = "log"
        worker_memory = [log_cal.available_kv_bytes] * (tp * pp)
        notes.append(
            "vLLM logs KV memory rounded to 0.01 GiB; the prediction can be a few blocks off near a boundary"
        )
    elif calibration is not None:
        source = "calibrated"
        worker_memory = [calibration.available_kv_bytes] * (tp * pp)
        notes.append(
            f"KV memory from the calibration record of {calibration.log} ({calibration.recorded_at}), the same host "
            "configuration and vLLM release; --no-calibration predicts instead"
        )
    else:
        source = "predicted"
        overhead = request.non_kv_overhead_bytes if request.non_kv_overhead_bytes is not None else DEFAULT_NON_KV_OVERHEAD_BYTES
        if request.non_kv_overhead_bytes is None:
            notes.append(
                f"non-KV overhead estimated at {format_gib(overhead)} per GPU (activations, CUDA graphs, NCCL); "
                "--from-log replaces the estimate with the measured figure"
            )
        gpu_predictions, more = _predict_memory(devices, geometry, request, overhead, request.weights_bytes_per_rank)
        notes.extend(more)
        refusals = [g.refusal for g in gpu_predictions if g.refusal]
        if refusals:
            refusal = refusals[0]
        # DP replicas are independent engines; the tightest one binds. Workers of one replica: tp*pp.
        per_replica = [gpu_predictions[i : i + tp * pp] for i in range(0, len(gpu_predictions), tp * pp)]
        tightest = min(per_replica, key=lambda reps: min(g.available_kv_bytes for g in reps))
        replica = list(tightest)
        worker_memory = [g.available_kv_bytes for g in tightest]
        if min(worker_memory) <= 0 and refusal is None:
            worst = min(tightest, key=lambda g: g.available_kv_bytes)
            refusal = (
                f"No available memory for the cache blocks on cuda:{worst.cuda_index}: weights "
                f"({format_gib(worst.weights_bytes)}) and overhead ({format_gib(worst.overhead_bytes)}) exceed "
                f"{request.gpu_memory_utilization} of {format_gib(worst.cuda_total_bytes)}"
            )
    if devices is not None:
        starts = [check_startup_memory(dev, request.gpu_memory_utilization) for dev in devices]
        if refusal is None:
            # vLLM checks free memory against the utilization budget at worker start even when
            # --kv-cache-memory-bytes fixes the KV size (a prediction has checked it already).
            refusal = next((s.refusal for s in starts if s.refusal), None)
    if devices is not None and refusal is None:
        slack = min(s.slack_bytes for s in starts)
        if slack < GiB:
            warnings.append(
                f"free memory is only {format_gib(slack)} above the --gpu-memory-utilization budget on the tightest GPU: "
                "anything else that allocates GPU memory before vLLM starts makes it refuse to start"
            )
    # Worker order: rank = pp_rank * tp + tp_rank.
    stage_layers = _worker_layer_sets(specs, geometry, pp)
    worker_layers = [stage_layers[rank // tp] for rank in range(tp * pp)]

    plans: dict[tuple, KvPlan] = {}  # the safe-length rule and the what-if table ask for the same plans again

    def plan(memory: list[int], *, length: int, auto: bool, tokens_in_flight: int) -> KvPlan:
        key = (tuple(memory), length, auto, tokens_in_flight)
        if key not in plans:
            plans[key] = plan_kv_cache(
                specs, worker_layers, memory, original_max_model_len=length, autofit=auto,
                max_in_flight_tokens=tokens_in_flight, rules=rules,
            )
        return plans[key]

    positive_memory = [max(m, 0) for m in worker_memory]
    auto_plan = plan(positive_memory, length=model_max, auto=True, tokens_in_flight=in_flight)
    autofit = _autofit_len(auto_plan)
    limiting = auto_plan.workers[auto_plan.limiting_pp_rank]
    kv_memory = worker_memory[auto_plan.limiting_pp_rank]

    if explicit is not None:
        if explicit > model_max:
            refusal = refusal or (
                f"User-specified max_model_len ({explicit}) is greater than the derived max_model_len "
                f"({geometry.max_len_key}={model_max} in model's config.json)."
            )
        else:
            explicit_plan = plan(positive_memory, length=explicit, auto=False, tokens_in_flight=in_flight)
            refusal = refusal or explicit_plan.error
    elif auto_plan.error:
        refusal = refusal or auto_plan.error

    # The KV memory's range and basis; the recommendation is computed from the low end.
    available_kv = _kv_estimate(
        request, source, kv_memory, log_cal, replica[auto_plan.limiting_pp_rank] if replica else None, devices,
        calibration.log if calibration is not None else None,
    )
    below = max(0, available_kv.value - available_kv.low)
    above = max(0, available_kv.high - available_kv.value)
    autofit_range = None
    if below or above:
        autofit_range = (
            _autofit_len(plan([max(m - below, 0) for m in positive_memory], length=model_max, auto=True, tokens_in_flight=in_flight)),
            _autofit_len(plan([m + above for m in positive_memory], length=model_max, auto=True, tokens_in_flight=in_flight)),
        )
    if available_kv.basis == "estimated":
        notes.append(
            f"KV memory per GPU {format_gib(available_kv.value)} is an estimate: {format_gib(max(available_kv.low, 0))}–"
            f"{format_gib(available_kv.high)} ({format_gib(available_kv.width)} wide, auto-fit "
            f"{format_tokens(autofit_range[0])}–{format_tokens(autofit_range[1])}); the recommendation uses the low end; "
            f"{available_kv.narrow}"
        )

    # Recommendation: the one safe-length rule (auto-fit again with the margin off every worker), from the low end.
    safe = safe_length(
        lambda cut, tokens: _autofit_len(plan([max(m - cut - below, 0) for m in positive_memory], length=model_max, auto=True, tokens_in_flight=tokens)),
        kv_memory_bytes=kv_memory, model_max=model_max, max_num_batched_tokens=mnbt, async_scheduling=async_on,
        pipeline_parallel_size=pp, margin=_as_margin(request.margin),
    )
    margin, recommended = safe.margin_bytes, safe.length
    if recommended <= 0 and autofit > 0:
        warnings.append(
            f"no length survives a margin of {format_gib(margin)}: the KV memory is too tight to recommend an explicit length"
        )

    full_needed = _full_context_bytes(auto_plan, model_max)
    what_if = []
    for row_mnbt in sorted(set(WHAT_IF_BATCHED_TOKENS) | {mnbt}):
        row_in_flight = max_concurrent_batches(async_on, pp) * row_mnbt
        row_plan = plan(positive_memory, length=model_max, auto=True, tokens_in_flight=row_in_flight)
        what_if.append(
            WhatIfRow(
                max_num_batched_tokens=row_mnbt,
                max_in_flight_tokens=row_in_flight,
                autofit_max_model_len=_autofit_len(row_plan),
                full_context_kv_memory_bytes=_full_context_bytes(row_plan, model_max),
                current=row_mnbt == mnbt,
            )
        )

    if log_cal is not None and log_cal.available_kv_bytes is not None and source == "log":
        # vLLM logs the memory rounded to 0.01 GiB: the run had something in [x - 0.005, x + 0.005) GiB.
        half = GiB // 200
        lo_plan = plan([max(m - half, 0) for m in positive_memory], length=model_max, auto=True, tokens_in_flight=in_flight)
        hi_plan = plan([m + half - 1 for m in positive_memory], length=model_max, auto=True, tokens_in_flight=in_flight)
        low, high = _autofit_len(lo_plan), _autofit_len(hi_plan)
        log_cal = replace(log_cal, predicted_from_log=autofit, predicted_range=(low, high))
        if log_cal.autofit_to is not None and not (low <= log_cal.autofit_to <= high):
            warnings.append(
                f"the log's auto-fit ({format_tokens(log_cal.autofit_to)}) is outside the prediction for its logged "
                f"memory ({format_tokens(low)}-{format_tokens(high)}): check that the flags match that run "
                "(--max-num-batched-tokens, async scheduling, --kv-cache-dtype, MTP) and its vLLM version"
            )

    if refusal is not None:
        verdict = "does_not_fit"
    elif autofit < model_max:
        verdict = "shrinks"
    else:
        verdict = "fits"
    will_shrink = autofit < model_max
    if verdict != "does_not_fit" and 0 < recommended < THINK_MAX_CONTEXT:
        warnings.append(
            f"recommended length {format_tokens(recommended)} is below {format_tokens(THINK_MAX_CONTEXT)} tokens, "
            "the context DeepSeek-V4's \"Think Max\" reasoning mode needs"
        )
    if will_shrink and explicit is None and verdict != "does_not_fit":
        if version.planned in STALE_LENGTH_RELEASES:
            warnings.append(
                f"--max-model-len auto would shrink the context from {format_tokens(model_max)} to {format_tokens(autofit)}; "
                f"vLLM {version.planned} then crashes in CUDA-graph capture (stale max_model_len) unless dsv4ctl's fix is "
                "active (dsv4ctl serve, or DSV4CTL_FIXES=all); else pass the recommended explicit length"
            )
        else:
            notes.append(
                f"--max-model-len auto would shrink the context from {format_tokens(model_max)} to {format_tokens(autofit)}; "
                "the shrunk length moves with the memory vLLM measures at each start"
            )

    flags = _vllm_flags(request, recommended if recommended > 0 else (explicit or autofit), mnbt, async_on)
    if log_cal is not None and request.inherit_from_log:
        flags += _log_only_flags(log_cal)
    return FitResult(
        geometry=geometry,
        request=request,
        verdict=verdict,
        refusal=refusal,
        model_max_model_len=model_max,
        autofit_max_model_len=autofit,
        will_shrink=will_shrink,
        shrink_tokens=max(0, model_max - autofit),
        requested_max_model_len=explicit,
        recommended_max_model_len=max(recommended, 0),
        kv_cache_memory_bytes=kv_memory,
        kv_cache_memory_source=source,
        margin_bytes=margin,
        bytes_per_block=max(w.bytes_per_block for w in auto_plan.workers),
        blocks_per_request=blocks_per_request(limiting.groups, max(autofit, 1), in_flight),
        num_blocks=min(w.num_blocks for w in auto_plan.workers),  # vLLM gives every worker the smallest count
        full_context_kv_memory_bytes=full_needed,
        max_num_batched_tokens=mnbt,
        max_num_batched_tokens_source=mnbt_source,
        max_num_seqs=max_num_seqs,
        async_scheduling=async_on,
        max_in_flight_tokens=in_flight,
        layout=layout,
        num_kv_cache_groups=len(auto_plan.global_groups),
        num_kv_layers=len(specs),
        gpus=tuple(gpu_predictions),
        log=log_cal,
        what_if=tuple(what_if),
        warnings=tuple(warnings),
        notes=tuple(notes),
        vllm_flags=tuple(flags),
        safe_length=safe,
        version=version,
        available_kv=available_kv,
        autofit_range=autofit_range,
    )


def _kv_estimate(
    request: FitRequest, source: str, kv_memory: int, log_cal: LogCalibration | None, gpu: GpuMemoryPrediction | None,
    devices: Any, calibration_log: str | None = None,
) -> KvMemoryEstimate:
    """The limiting GPU's available KV memory as vLLM's worker computes it, term by term, with basis and range."""
    if source == "given":
        term = KvTerm("kv_cache_memory", kv_memory, kv_memory, kv_memory, "exact", "--kv-cache-memory(-bytes)")
        return KvMemoryEstimate(kv_memory, kv_memory, kv_memory, "exact", (term,))
    if source in ("log", "calibrated") or gpu is None:
        half = GiB // 200  # vLLM logs the figure rounded to 0.01 GiB
        basis = "calibrated" if source == "calibrated" else "measured"
        where = calibration_log if source == "calibrated" else (log_cal.path if log_cal is not None else "the startup log")
        term = KvTerm("kv_cache_memory", kv_memory, kv_memory - half, kv_memory + half - 1, basis,
                      f"{where}: \"Available KV cache memory\" (rounded to 0.01 GiB)")
        return KvMemoryEstimate(kv_memory, term.low, term.high, basis, (term,),
                                "--kv-cache-memory-bytes with the logged figure makes it exact")
    req = gpu.requested_bytes
    requested = KvTerm(
        "requested", req, req, req, "measured",
        f"ceil(CUDA total {format_gib(gpu.cuda_total_bytes)} x --gpu-memory-utilization {request.gpu_memory_utilization:g}), "
        f"cuda:{gpu.cuda_index} {gpu.name} ({'snapshot ' + str(request.gpus) if request.gpus else 'NVML'})",
    )
    w = gpu.weights_bytes
    weights = KvTerm("weights", w, w, w, "exact" if request.weights_bytes_per_rank is not None else "checkpoint",
                     "--weights-memory" if request.weights_bytes_per_rank is not None
                     else "the checkpoint's safetensors headers, split by TP/PP/EP")
    o = gpu.overhead_bytes
    if request.non_kv_overhead_bytes is not None:
        overhead = KvTerm("non_kv_overhead", o, o, o, "exact", "--overhead")
    else:
        overhead = KvTerm(
            "non_kv_overhead", o, max(0, o - NON_KV_OVERHEAD_SPREAD_BYTES), o + NON_KV_OVERHEAD_SPREAD_BYTES, "estimated",
            "activation peak, non-torch memory and the CUDA-graph estimate: 6 GiB +/- 4 GiB "
            "(vllm#54677: the same launch needed ~4 GiB/GPU more on 0.28.0 than on 0.26.0)",
        )
    subtracted = [weights, overhead]
    if devices and any(getattr(d, "is_unified_memory", False) for d in devices):
        u = UNIFIED_MEMORY_SPREAD_BYTES
        subtracted.append(KvTerm("unified_memory_swing", 0, -u, u, "estimated",
                                 "unified memory follows host memory (upstream report: 9.81 vs 12.3 GiB on two starts)"))
    return combine_terms(
        requested, subtracted,
        "--from-log LOG (a startup's measured KV memory), --overhead SIZE or --kv-cache-memory SIZE narrows it",
    )


def _plan_nodes(request: FitRequest, paths: tuple[str, ...], timeline: Any, geometry: Dsv4Geometry) -> FitResult:
    """Several nodes (a snapshot each): plan every node, answer with the tightest one and name its GPU.

    vLLM gives every worker of an engine the smallest block count, so the node that fits the least binds;
    a refusal on any node binds first."""
    from dsv4ctl.gpu import load_snapshot

    results = []
    for path in paths:
        snap = load_snapshot(path)
        result = plan_fit(replace(request, gpus=path), snapshot=snap, timeline=timeline, geometry=geometry)
        results.append((path, snap, result))

    def tightness(item: tuple[str, Any, FitResult]) -> tuple:
        _, _, r = item
        return (r.fits, r.autofit_max_model_len, r.kv_cache_memory_bytes)

    path, snap, tightest = min(results, key=tightness)
    nodes = []
    for p, sn, r in results:
        gpu = r.tightest_gpu
        nodes.append({
            "snapshot": p, "hostname": getattr(sn, "hostname", None), "fits": r.fits,
            "autofit_max_model_len": r.autofit_max_model_len, "kv_cache_memory_bytes": r.kv_cache_memory_bytes,
            "tightest_gpu": {"cuda_index": gpu.cuda_index, "name": gpu.name} if gpu else None,
            "binding": p == path,
        })
    gpu = tightest.tightest_gpu
    where = f"cuda:{gpu.cuda_index} ({gpu.name}) of {path}" if gpu else path
    host = getattr(snap, "hostname", None)
    note = (
        f"{len(paths)} nodes planned; the tightest is {where}{f' on {host}' if host else ''}: "
        f"{format_gib(tightest.kv_cache_memory_bytes)} KV per GPU, auto-fit {format_tokens(tightest.autofit_max_model_len)}"
    )
    return replace(tightest, nodes=tuple(nodes), notes=(*tightest.notes, note))


def _vllm_flags(request: FitRequest, max_model_len: int, mnbt: int, async_on: bool) -> list[str]:
    """The `vllm serve` flags that pin every input the answer depends on."""
    flags = ["--max-model-len", str(max_model_len), "--max-num-batched-tokens", str(mnbt)]
    if request.kv_cache_memory_bytes is not None:
        flags += ["--kv-cache-memory-bytes", str(request.kv_cache_memory_bytes)]
    else:
        flags += ["--gpu-memory-utilization", f"{request.gpu_memory_utilization:g}"]
    if request.kv_cache_dtype != "auto":
        flags += ["--kv-cache-dtype", request.kv_cache_dtype]
    if request.attention_backend:
        flags += ["--attention-backend", request.attention_backend]
    if request.max_num_seqs is not None:
        flags += ["--max-num-seqs", str(request.max_num_seqs)]
    if request.tensor_parallel_size > 1:
        flags += ["--tensor-parallel-size", str(request.tensor_parallel_size)]
    if request.pipeline_parallel_size > 1:
        flags += ["--pipeline-parallel-size", str(request.pipeline_parallel_size)]
    if request.data_parallel_size > 1:
        flags += ["--data-parallel-size", str(request.data_parallel_size)]
    if request.enable_expert_parallel:
        flags += ["--enable-expert-parallel"]
    if request.async_scheduling is False:
        flags += ["--no-async-scheduling"]
    if request.num_speculative_tokens > 0:
        flags += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": request.num_speculative_tokens})]
    return flags


def _log_only_flags(log_cal: LogCalibration) -> list[str]:
    """The log's other non-default args (the port, --trust-remote-code, a compilation config, …): the
    printed `vllm serve` line is then that deployment's, changed only where the plan says."""
    from dsv4ctl.logs.deployment import flag_tokens

    planned = {*_LOG_FIELDS, "speculative_config", "max_model_len", "kv_cache_memory_bytes", "model", "model_tag"}
    tokens: list[str] = []
    for name, value in log_cal.serve_args.items():
        if name not in planned:
            tokens += flag_tokens(name, value)
    return tokens


# --------------------------------------------------------------------------------------------------
# Startup logs
# --------------------------------------------------------------------------------------------------


def _as_log_calibration(timeline: Any, path: str | None) -> LogCalibration:
    """The fit-relevant figures of a `dsv4ctl.logs.timeline.StartupTimeline` (GiB as vLLM rounds them)."""
    if isinstance(timeline, LogCalibration):
        return timeline
    from dsv4ctl.logs.deployment import launch_args

    def gib_bytes(value: Any) -> int | None:
        return None if value is None else int(round(float(value) * GiB))

    autofit = getattr(timeline, "autofit", None)
    max_len = getattr(timeline, "max_model_len", None)
    if autofit is not None:
        logged_from, logged_to = autofit.from_len, autofit.to_len
    elif getattr(timeline, "autofit_full_fit", False):
        logged_from = logged_to = max_len
    else:
        logged_from = logged_to = None
    return LogCalibration(
        path=path or "<timeline>",
        available_kv_bytes=gib_bytes(getattr(timeline, "available_kv_gib", None)),
        weights_bytes=gib_bytes(getattr(timeline, "weights_gib", None)),
        graph_bytes=gib_bytes(getattr(timeline, "graph_capture_gib", None)),
        autofit_from=logged_from,
        autofit_to=logged_to,
        max_model_len=getattr(timeline, "effective_max_model_len", None) or max_len,
        vllm_version=getattr(timeline, "vllm_version", None),
        serve_args=launch_args(timeline),
    )


# The log's `non-default args` (vLLM's EngineArgs names) that a FitRequest field takes as they are.
_LOG_FIELDS = ("gpu_memory_utilization", "kv_cache_dtype", "block_size", "max_num_batched_tokens", "max_num_seqs",
               "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel",
               "async_scheduling", "attention_backend")


def inherit_log_flags(request: FitRequest, log_cal: LogCalibration) -> tuple[FitRequest, list[str]]:
    """The request with the log's own flags for every field the operator did not give, and what was taken."""
    args = log_cal.serve_args
    taken: dict[str, Any] = {}
    for name in _LOG_FIELDS:
        if name in args and name not in request.explicit and args[name] is not None:
            taken[name] = args[name]
    if "speculative_config" in args and "num_speculative_tokens" not in request.explicit:
        try:
            taken["num_speculative_tokens"] = speculative_tokens(args["speculative_config"])
        except Dsv4ctlError:
            pass
    if not taken:
        return request, []
    shown = ", ".join(f"{k}={v}" for k, v in taken.items())
    return replace(request, **taken), [f"from {log_cal.path}'s non-default args: {shown}"]


def read_log_calibration(path: str) -> LogCalibration:
    """Read a vLLM startup log with `dsv4ctl.logs` (the `diagnose` reader) and keep what fit-length needs."""
    from dsv4ctl.logs.diagnose import diagnose

    return _as_log_calibration(diagnose(path).timeline, path)


__all__ = [
    "FitRequest",
    "FitResult",
    "Margin",
    "WhatIfRow",
    "LogCalibration",
    "plan_fit",
    "parse_max_model_len",
    "parse_margin",
    "parse_speculative_config",
    "speculative_tokens",
    "default_batch_limits",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "THINK_MAX_CONTEXT",
    "Dsv4ctlError",
]
