"""What fit-length is asked: `FitRequest` (vLLM's flag names and defaults), the margin, and the flags parsed as
vLLM parses them; `validate` refuses what no GPU could mean."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from dsv4ctl.errors import UsageError
from dsv4ctl.planning.mirror.measured import ESTIMATE_DEFAULT_UTILIZATION
from dsv4ctl.planning.plan.safe_length import MARGIN_FRACTION, MIN_MARGIN_BYTES
from dsv4ctl.units import GiB, format_gib, parse_memory_flag, parse_vllm_int

# vLLM's defaults (config/cache.py, config/scheduler.py, engine/arg_utils.py:get_batch_defaults).
# --gpu-memory-utilization: 0.92 through 0.33 (vllm==0.33.0 config/cache.py:215) and in 0.34's estimate mode
# (vllm==0.34.0 config/cache.py:186); 0.34 leaves it unset and resolves 1.0 in its measured mode (`:494-501`):
# a request leaves it None for the release's own default (planning/mirror/measured.py `sizing_mode`).
DEFAULT_GPU_MEMORY_UTILIZATION = ESTIMATE_DEFAULT_UTILIZATION


SCHEDULER_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048


BATCHED_DP_DEFAULT_MAX_NUM_BATCHED_TOKENS = 256


# When no GPU is known (given --kv-cache-memory, no snapshot), assume the H100/H200 class DeepSeek-V4 runs on.
ASSUMED_DEVICE_TOTAL_BYTES = 80 * GiB


# Recommendation margin: a share of the KV memory, but at least a floor (the one rule: planning/plan/safe_length.py).
DEFAULT_MARGIN_FRACTION = MARGIN_FRACTION


# Per-GPU sizes above this are typing mistakes (a whole node's figure, or bits for bytes).
MAX_PER_GPU_BYTES = 64 << 40
MAX_CHECKPOINT_BYTES = 1 << 50


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
    gpu_memory_utilization: float | None = None  # None: the release's default for its sizing mode (0.92, or 1.0)
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
    # vLLM 0.34+'s measured ("extensible") KV cache: None is vLLM's default (on for CUDA unless a flag below turns it
    # off); --num-gpu-blocks-override and --enable-elastic-ep turn it off as --kv-cache-memory-bytes does.
    enable_extensible_kv_cache: bool | None = None
    num_gpu_blocks_override: int | None = None
    enable_elastic_ep: bool = False
    engram_config: str | dict[str, Any] | None = None  # DeepSeek-V4.1's --engram-config (JSON), None: vLLM's defaults
    # dsv4ctl's own inputs
    margin: Margin = field(default_factory=Margin)
    weights_bytes_per_rank: int | None = None  # overrides the checkpoint's safetensors size
    checkpoint_bytes: int | None = None  # the whole checkpoint's size (split per rank like the headers)
    non_kv_overhead_bytes: int | None = None  # None: estimate (or measured from the log)
    host_memory_bytes: int | None = None  # DeepSeek-V4.1: host RAM available per node for pinning (--host-memory)
    plans_this_host: bool = False  # the plan is for this machine whatever GPUs are read (serve): its host memory read here
    gpus: str | tuple[str, ...] | None = None  # snapshot JSON path(s), one per node; None: NVML when a prediction needs GPUs
    from_log: str | None = None  # a previous startup log of the same model
    vllm_version: str | None = None  # whose planner to mirror; None: installed vLLM, else the log's, else newest known
    enforce_eager: bool = False  # vLLM's --enforce-eager (no CUDA graphs): part of a calibration's configuration
    no_calibration: bool = False  # ignore calibration records (dsv4ctl.planning.plan.calibration)
    # With from_log: take the launch's own flags from the log's `non-default args` for every field not
    # named here (the CLI passes the flags the operator typed), so the plan is that deployment's.
    inherit_from_log: bool = False
    explicit: frozenset[str] = frozenset()

    @property
    def is_auto(self) -> bool:
        return self.max_model_len is None or self.max_model_len == -1


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


def validate(request: FitRequest) -> None:
    def positive(name: str, value: int | None, limit: int) -> None:
        if value is not None and (value < 1 or value > limit):
            raise UsageError(f"--{name.replace('_', '-')} must be between 1 and {limit:,}, got {value}")

    positive("tensor_parallel_size", request.tensor_parallel_size, 4096)
    positive("pipeline_parallel_size", request.pipeline_parallel_size, 1024)
    positive("data_parallel_size", request.data_parallel_size, 65536)
    positive("max_num_batched_tokens", request.max_num_batched_tokens, 1 << 26)
    positive("max_num_seqs", request.max_num_seqs, 1 << 20)
    util = request.gpu_memory_utilization
    if util is not None and (not (0 < util <= 1) or not math.isfinite(util)):
        raise UsageError(
            f"--gpu-memory-utilization must be in (0, 1], got {util}",
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
    if request.checkpoint_bytes is not None and not (0 < request.checkpoint_bytes <= MAX_CHECKPOINT_BYTES):
        raise UsageError("--checkpoint-size must be positive and below 1 PiB", hint="the whole checkpoint, e.g. 160GB")
    if request.checkpoint_bytes is not None and request.weights_bytes_per_rank is not None:
        raise UsageError("--checkpoint-size and --weights-memory both say what the weights are", hint="give one")
    for name in ("weights_bytes_per_rank", "non_kv_overhead_bytes"):
        value = getattr(request, name)
        if value is not None and (value < 0 or value > MAX_PER_GPU_BYTES):
            raise UsageError(f"{name.replace('_', ' ')} {value} is out of range")
    margin = as_margin(request.margin)
    if margin.bytes is not None and margin.bytes > MAX_PER_GPU_BYTES:
        raise UsageError("--margin is larger than any GPU")


def as_margin(value: Any) -> Margin:
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
