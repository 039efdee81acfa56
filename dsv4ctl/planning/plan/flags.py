"""Flags in and out of a plan: the log's own `non-default args` a request inherits, and the `vllm serve` flags
that pin every input the answer depends on."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from dsv4ctl.errors import Dsv4ctlError
from dsv4ctl.logs.deployment import flag_tokens
from dsv4ctl.logs.facts import LogCalibration
from dsv4ctl.planning.mirror.measured import SizingMode, has_measured_mode
from dsv4ctl.planning.plan.request import FitRequest, speculative_tokens

# The log's `non-default args` (vLLM's EngineArgs names) that a FitRequest field takes as they are.
LOG_FIELDS = ("gpu_memory_utilization", "kv_cache_dtype", "block_size", "max_num_batched_tokens", "max_num_seqs",
               "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "enable_expert_parallel",
               "async_scheduling", "attention_backend", "enable_extensible_kv_cache", "num_gpu_blocks_override",
               "enable_elastic_ep")


def inherit_log_flags(request: FitRequest, log_cal: LogCalibration) -> tuple[FitRequest, list[str]]:
    """The request with the log's own flags for every field the operator did not give, and what was taken."""
    args = log_cal.serve_args
    taken: dict[str, Any] = {}
    for name in LOG_FIELDS:
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


def vllm_flags(
    request: FitRequest, max_model_len: int, mnbt: int, async_on: bool, sizing: SizingMode | None = None
) -> list[str]:
    """The `vllm serve` flags that pin every input the answer depends on. vLLM 0.34+ gets
    --gpu-memory-utilization only when it was given: its default depends on the sizing mode (1.0 measured), and
    0.92 would cap the measured cache at 0.92 x the GPU."""
    flags = ["--max-model-len", str(max_model_len), "--max-num-batched-tokens", str(mnbt)]
    if request.kv_cache_memory_bytes is not None:
        flags += ["--kv-cache-memory-bytes", str(request.kv_cache_memory_bytes)]
    elif sizing is None or sizing.utilization_given or not has_measured_mode(sizing.release):
        flags += ["--gpu-memory-utilization", f"{request.gpu_memory_utilization:g}"]
    if request.enable_extensible_kv_cache is False and (sizing is None or not sizing.release or has_measured_mode(sizing.release)):
        flags += ["--no-enable-extensible-kv-cache"]  # a 0.34+ flag: an earlier release's parser rejects it
    if request.num_gpu_blocks_override is not None:
        flags += ["--num-gpu-blocks-override", str(request.num_gpu_blocks_override)]
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
    if request.engram_config is not None:  # DeepSeek-V4.1: where the Engram tables live, as planned
        text = request.engram_config
        flags += ["--engram-config", text if isinstance(text, str) else json.dumps(text)]
    return flags


def log_only_flags(log_cal: LogCalibration) -> list[str]:
    """The log's other non-default args (the port, --trust-remote-code, a compilation config, …): the
    printed `vllm serve` line is then that deployment's, changed only where the plan says."""
    planned = {*LOG_FIELDS, "speculative_config", "max_model_len", "kv_cache_memory_bytes", "model", "model_tag"}
    tokens: list[str] = []
    for name, value in log_cal.serve_args.items():
        if name not in planned:
            tokens += flag_tokens(name, value)
    return tokens
