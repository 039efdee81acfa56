"""The launch's own flags, read back from its log, so every command dsv4ctl suggests keeps them.

vLLM logs the flags a launch changed as `non-default args: {...}` (vllm/entrypoints/serve/utils/
api_utils.py:286, 0.32.0; `get_non_default_args` against the parser's defaults, secrets redacted), by
their argparse destination names. `serve_flags` turns them back into command-line flags as vLLM's parser
reads them (a `--no-` flag for a boolean whose default is on, JSON for dict-valued flags), minus what the
suggestion changes; `fit_length_flags` keeps those `dsv4ctl fit-length` takes. When the log has no
`non-default args` line, the engine-config line's parallel sizes and kv-cache dtype stand in.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from dsv4ctl.logs.timeline import StartupTimeline
from dsv4ctl.logs.timeline_model import MEASURED_FROM, release

# Not flags: the positional model, and values vLLM redacted.
_SKIP = {"model_tag", "model", "dispatch_function", "subparser"}
# The flags `dsv4ctl fit-length` takes, by vLLM's destination names (dsv4ctl/cli.py fit-length).
FIT_LENGTH_ARGS = (
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "gpu_memory_utilization",
    "kv_cache_dtype",
    "attention_backend",
    "block_size",
    "max_num_batched_tokens",
    "max_num_seqs",
    "async_scheduling",
    "speculative_config",
    "kv_cache_memory_bytes",
)


def launch_args(tl: StartupTimeline) -> dict[str, Any]:
    """The launch's flags by vLLM's names: `non-default args`, else what the engine-config line says."""
    if tl.serve_args:
        return dict(tl.serve_args)
    # No non-default args line: what the engine config line says.
    out: dict[str, Any] = {}
    for name, value, default in (
        ("tensor_parallel_size", tl.tensor_parallel_size, 1),
        ("pipeline_parallel_size", tl.pipeline_parallel_size, 1),
        ("data_parallel_size", tl.data_parallel_size, 1),
        ("kv_cache_dtype", tl.kv_cache_dtype, "auto"),
    ):
        if value is not None and value != default:
            out[name] = value
    if tl.enable_expert_parallel:
        out["enable_expert_parallel"] = True
    if tl.enforce_eager:
        out["enforce_eager"] = True
    return out


def flag_tokens(name: str, value: Any) -> list[str]:
    """One launch argument back as command-line tokens (`--name value`, `--flag`, `--no-flag`, JSON)."""
    flag = "--" + name.replace("_", "-")
    if value is None:
        return []
    if isinstance(value, bool):
        return [flag] if value else ["--no-" + name.replace("_", "-")]
    if isinstance(value, dict):
        return [flag, json.dumps(value, separators=(", ", ": "))]
    if isinstance(value, (list, tuple)):
        items = [str(v) for v in value]
        return [flag, *items] if items else []
    text = str(value)
    if text and set(text) <= {"*"}:
        return []  # redacted by vLLM
    return [flag, text]


def _join(tokens: list[str]) -> str:
    return "".join(" " + shlex.quote(t) for t in tokens)


def serve_flags(tl: StartupTimeline, drop: tuple[str, ...] = ("max_model_len",)) -> str:
    """The launch's flags for `vllm serve` / `dsv4ctl serve`, each prefixed by a space ("" when none)."""
    tokens: list[str] = []
    for name, value in launch_args(tl).items():
        if name in _SKIP or name in drop:
            continue
        tokens += flag_tokens(name, value)
    return _join(tokens)


def fit_length_flags(tl: StartupTimeline) -> str:
    """The launch's flags that `dsv4ctl fit-length` takes (its `vllm serve` line then keeps them)."""
    args = launch_args(tl)
    tokens: list[str] = []
    for name in FIT_LENGTH_ARGS:
        if name in args:
            tokens += flag_tokens(name, args[name])
    plan_as = planned_release(tl)
    if plan_as:
        tokens += ["--vllm-version", plan_as]
    return _join(tokens)


def planned_release(tl: StartupTimeline) -> str | None:
    """The release a plan of this start names (--vllm-version), else None (fit-length's own choice: the vLLM
    installed where it runs). A start of vLLM 0.34+ is planned as its release: the release decides the sizing mode
    (measured by default) and what the log's figures are (blocks committed after warm-up, or the estimate's "Available
    KV cache memory"), and the vLLM installed where the command runs may be an earlier one."""
    r = release(tl.vllm_version)
    if tl.vllm_version and (tl.sizing_mode_known == "measured" or (r is not None and r >= MEASURED_FROM)):
        return tl.vllm_version
    return None


def model_arg(tl: StartupTimeline) -> str | None:
    return shlex.quote(tl.model) if tl.model else None
