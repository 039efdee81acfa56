"""What would fit when nothing fits as asked: each change planned as vLLM would plan it, with its command.

`what_would_fit(request, result, plan)` tries, in the order an operator would reach for them, the changes that
can make room: a shorter explicit length, the fp8 KV cache, fewer batched tokens (less memory held for tokens
in flight), a higher --gpu-memory-utilization where free memory allows it, more of the visible GPUs for
tensor parallelism. Each is planned again (`plan`, fit-length's own planner, the same GPUs and log figures)
and kept only when that plan fits with a length that survives the margin, so every command it prints runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

from dsv4ctl.errors import Dsv4ctlError
from dsv4ctl.planning.plan.request import FitRequest
from dsv4ctl.planning.plan.result import FitResult

# The smallest of vLLM's default batch limits (engine/arg_utils.py get_batch_defaults: 2048 for smaller GPUs).
SMALL_BATCHED_TOKENS = 2048


@dataclass(frozen=True)
class Alternative:
    """One change that makes the plan fit, and what vLLM would then do."""

    change: str  # the flags that change, as typed: "--kv-cache-dtype fp8"
    why: str
    autofit_max_model_len: int
    recommended_max_model_len: int
    vllm_command: str

    def to_json(self) -> dict[str, Any]:
        return {"change": self.change, "why": self.why, "autofit_max_model_len": self.autofit_max_model_len,
                "recommended_max_model_len": self.recommended_max_model_len, "vllm_command": self.vllm_command}


def what_would_fit(request: FitRequest, result: FitResult, plan: Callable[[FitRequest], FitResult]) -> tuple[Alternative, ...]:
    out = []
    for change, why, changed in _candidates(request, result):
        try:
            planned = plan(changed)
        except Dsv4ctlError:
            continue
        command = planned.vllm_command()
        if planned.fits and planned.recommended_max_model_len > 0 and command:
            out.append(Alternative(change, why, planned.autofit_max_model_len, planned.recommended_max_model_len, command))
    return tuple(out)


def _candidates(request: FitRequest, result: FitResult) -> list[tuple[str, str, FitRequest]]:
    out: list[tuple[str, str, FitRequest]] = []
    explicit = None if request.is_auto else request.max_model_len
    if explicit is not None and result.autofit_max_model_len > 0:
        out.append(("--max-model-len auto", "let vLLM fit the length to the memory (the plan shows what it picks)",
                    replace(request, max_model_len=None)))
    if not result.layout.kv_cache_dtype.startswith("fp8"):
        out.append(("--kv-cache-dtype fp8", "half the KV bytes per token (the fp8_ds_mla layout)",
                    replace(request, kv_cache_dtype="fp8")))
    if result.max_num_batched_tokens > SMALL_BATCHED_TOKENS:
        out.append((f"--max-num-batched-tokens {SMALL_BATCHED_TOKENS}",
                    "fewer tokens in flight, so fewer KV blocks held for them",
                    replace(request, max_num_batched_tokens=SMALL_BATCHED_TOKENS)))
    util = _highest_utilization(result)
    if util is not None and util > request.gpu_memory_utilization and request.kv_cache_memory_bytes is None:
        out.append((f"--gpu-memory-utilization {util:g}", "the most this GPU's free memory allows at start",
                    replace(request, gpu_memory_utilization=util)))
    tp = _more_tensor_parallel(request, result)
    if tp is not None:
        out.append((f"--tensor-parallel-size {tp}", "the weights and KV cache spread over more of the visible GPUs",
                    replace(request, tensor_parallel_size=tp, explicit=request.explicit | {"tensor_parallel_size"})))
    return out


def _highest_utilization(result: FitResult) -> float | None:
    """The largest --gpu-memory-utilization (in hundredths) that every planned GPU's free memory at start
    covers: vLLM refuses to start when free memory is below ceil(total x utilization)."""
    if not result.gpus:
        return None
    shares = [g.cuda_free_at_start / g.cuda_total_bytes for g in result.gpus if g.cuda_total_bytes > 0]
    if not shares:
        return None
    util = math.floor(min(shares) * 100) / 100
    return min(util, 0.99) if util > 0 else None


def _more_tensor_parallel(request: FitRequest, result: FitResult) -> int | None:
    """Twice the tensor parallelism, when the snapshot has the GPUs for it (only planned GPUs are known here:
    the visible count comes from the snapshot the plan read)."""
    visible = result.visible_gpus
    tp = request.tensor_parallel_size * 2
    if visible and tp * request.pipeline_parallel_size * request.data_parallel_size <= visible:
        return tp
    return None
