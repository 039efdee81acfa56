"""What would fit when nothing fits as asked: each change planned as vLLM would plan it, with its command.

`what_would_fit(request, result, plan)` tries, in the order an operator would reach for them, the changes that
can make room: a shorter explicit length, the fp8 KV cache, fewer batched tokens (less memory held for tokens
in flight), a lower --gpu-memory-utilization where free memory at start is below the budget (vLLM's own advice), a
higher one where free memory allows it, more of the visible GPUs for
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

# A shorter explicit length: planned without one, and named by the safe length the plan finds.
_SHORTER = "--max-model-len"

# The smallest of vLLM's default batch limits (engine/arg_utils.py get_batch_defaults: 2048 for smaller GPUs).
SMALL_BATCHED_TOKENS = 2048


@dataclass(frozen=True)
class Alternative:
    """One change that makes the plan fit, and what vLLM would then do."""

    change: str  # the flags that change, as typed: "--kv-cache-dtype fp8"
    why: str
    autofit_max_model_len: int
    recommended_max_model_len: int  # the length its command carries (the one asked for, where it fits)
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
        # The length its command carries: the one asked for where it now fits, else the safe one.
        length = planned.requested_max_model_len or planned.recommended_max_model_len
        if planned.fits and length > 0 and command:
            if change == _SHORTER:  # the length it carries is what the plan found: named as such
                change = f"--max-model-len {length}"
                why = (f"the longest safe length at this memory (--max-model-len auto would pick "
                       f"{planned.autofit_max_model_len:,})")
            out.append(Alternative(change, why, planned.autofit_max_model_len, length, command))
    return tuple(out)


def _candidates(request: FitRequest, result: FitResult) -> list[tuple[str, str, FitRequest]]:
    out: list[tuple[str, str, FitRequest]] = []
    explicit = None if request.is_auto else request.max_model_len
    if explicit is not None and result.autofit_max_model_len > 0:
        out.append((_SHORTER, "", replace(request, max_model_len=None)))
    if not result.layout.kv_cache_dtype.startswith("fp8"):
        out.append(("--kv-cache-dtype fp8", "half the KV bytes per token (the fp8_ds_mla layout)",
                    replace(request, kv_cache_dtype="fp8")))
    if result.max_num_batched_tokens > SMALL_BATCHED_TOKENS:
        out.append((f"--max-num-batched-tokens {SMALL_BATCHED_TOKENS}",
                    "fewer tokens in flight, so fewer KV blocks held for them",
                    replace(request, max_num_batched_tokens=SMALL_BATCHED_TOKENS)))
    util = _highest_utilization(result)
    short_at_start = any(g.refusal for g in result.gpus)
    if util is not None and util < request.gpu_memory_utilization and short_at_start:
        # vLLM's own advice when free memory at start is below the budget: "Decrease GPU memory utilization or reduce
        # GPU memory used by other processes." (vllm==0.33.0 vllm/v1/worker/utils.py:761-769, request_memory)
        tight = min(result.gpus, key=lambda g: g.cuda_free_at_start / max(g.cuda_total_bytes, 1))
        out.append((f"--gpu-memory-utilization {util:g}",
                    f"the most cuda:{tight.cuda_index}'s free memory allows at start (vLLM's own advice: decrease GPU "
                    "memory utilization, or free the memory other processes hold)",
                    replace(request, gpu_memory_utilization=util)))
    elif util is not None and util > request.gpu_memory_utilization and request.kv_cache_memory_bytes is None:
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
