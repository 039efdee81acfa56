"""What the family answers share: this launch's command with one change, the vLLM flag that sets a named value."""

from __future__ import annotations

import shlex
from typing import Any

from dsv4ctl.logs import deployment
from dsv4ctl.logs.timeline import StartupTimeline

# The engine arguments a message names most often, when the per-release flag table (catalogue/vllm_flags) is not
# there: each is an EngineArgs field of vLLM 0.27.1-0.33.0 (vllm/engine/arg_utils.py) whose flag is its kebab-case.
_COMMON_FIELDS = frozenset({
    "max_lora_rank", "max_loras", "max_cpu_loras", "max_num_seqs", "max_model_len", "max_num_batched_tokens",
    "gpu_memory_utilization", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "block_size",
    "max_logprobs", "kv_cache_memory_bytes", "num_gpu_blocks_override", "limit_mm_per_prompt", "max_num_partial_prefills",
    "long_prefill_token_threshold", "max_long_partial_prefills", "max_cudagraph_capture_size", "swap_space",
})


def flag_for(name: str | None, release: str | None = None) -> str | None:
    """The `vllm serve` flag that sets the engine argument `name` ("max_lora_rank" -> "--max-lora-rank"), or None."""
    if not name:
        return None
    key = name.strip().strip("`'\"").lstrip("-").replace("-", "_")
    try:
        from dsv4ctl.catalogue import vllm_flags
    except ImportError:  # the per-release table is optional data
        vllm_flags = None  # type: ignore[assignment]
    if vllm_flags is not None:
        try:
            flag = vllm_flags.flag_for_field(key, _plain(release))
        except Exception:  # noqa: BLE001 - the table is advice data: a broken table falls back, never fails diagnose
            flag = None
        if flag:
            return flag
    return "--" + key.replace("_", "-") if key in _COMMON_FIELDS else None


def _plain(release: str | None) -> str | None:
    return release.split("+")[0] if release else None


def serve_with(tl: StartupTimeline, changes: dict[str, Any], drop: tuple[str, ...] = ()) -> str | None:
    """This launch's own `vllm serve` command with `changes` (vLLM destination names) applied and `drop` removed;
    None when the log does not name the model (a command with a placeholder would not run)."""
    if not tl.model:
        return None
    tokens: list[str] = []
    for name, value in deployment.launch_args(tl).items():
        if name in ("model_tag", "model", "dispatch_function", "subparser") or name in changes or name in drop:
            continue
        tokens += deployment.flag_tokens(name, value)
    for name, value in changes.items():
        tokens += deployment.flag_tokens(name, value)
    return f"vllm serve {shlex.quote(tl.model)}" + "".join(" " + shlex.quote(t) for t in tokens)


def with_command(key: str, command: str | None) -> dict[str, str]:
    """`{key}` and `{key}_sep` for a template "…{key_sep}{key}": ": <command>" when there is a command, else nothing."""
    return {key: command or "", f"{key}_sep": ": " if command else ""}


def arg(tl: StartupTimeline, name: str) -> Any:
    return deployment.launch_args(tl).get(name)
