"""The facts of one start, by name, each with the line it rests on: what `diff` lines up.

Every value is the log's: the timeline `diagnose` reconstructs (`logs.timeline`: the length vLLM resolved, auto-fit,
the KV memory, the release, the parallel sizes, the model), the launch's `non-default args` (`logs.timeline_launch`,
read as the Python dict vLLM prints), and what `read._Scan` found on the start's lines (environment, fixes, versions).
A fact the log does not show is absent, never a default.
"""

from __future__ import annotations

from typing import Any

from dsv4ctl import re_cache
from dsv4ctl.compare.model import Seen, StartRead
from dsv4ctl.logs.timeline import LineRef, StartupTimeline

# The categories, in the order a difference of equal bearing is listed.
CATEGORIES = ("length", "memory", "release", "parallel", "args", "env", "model")
# The launch arguments that size the KV cache (vLLM's EngineArgs names).
MEMORY_ARGS = {"gpu_memory_utilization", "kv_cache_memory_bytes", "kv_cache_dtype", "block_size", "max_num_seqs",
               "max_num_batched_tokens", "cpu_offload_gb", "swap_space", "calculate_kv_scales"}
_SKIP_ARGS = {"model", "model_tag"}
_AVAILABLE = re_cache.compile(r"Available KV cache memory: (-?[0-9]+(?:\.[0-9]+)?) GiB")

Facts = dict[str, tuple[str, Seen | None]]


def _at(tl: StartupTimeline, value: Any, *keys: str) -> Seen | None:
    if value is None:
        return None
    ref: LineRef | None = next((tl.refs[k] for k in keys if k in tl.refs), None)
    return Seen(str(value), ref.source if ref else None, ref.line if ref else None)


def arg_flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def arg_category(name: str) -> str:
    if name == "max_model_len":
        return "length"
    if name in MEMORY_ARGS:
        return "memory"
    return "parallel" if "parallel" in name else "args"


def arg_text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def length_facts(tl: StartupTimeline) -> Facts:
    resolved = tl.effective_max_model_len or tl.max_model_len
    if tl.autofit is not None:
        autofit = f"reduced {tl.autofit.from_len} -> {tl.autofit.to_len}"
    elif tl.autofit_full_fit:
        autofit = f"full length {tl.max_model_len} fits"
    else:
        autofit = None
    available = None
    if tl.available_kv_gib is not None:
        m = _AVAILABLE.search(tl.available_kv_line or "")
        available = f"{m.group(1) if m else f'{tl.available_kv_gib:g}'} GiB"
    return {
        "auto-fit": ("length", _at(tl, autofit, "autofit", "autofit_full")),
        "max_model_len (resolved)": ("length", _at(tl, resolved, "autofit", "autofit_full", "max_concurrency",
                                                    "max_model_len")),
        "available KV cache memory": ("memory", _at(tl, available, "available_kv")),
        "KV cache size (tokens)": ("memory", _at(tl, tl.kv_cache_tokens, "kv_cache_size")),
    }


def release_facts(s: StartRead) -> Facts:
    tl = s.diagnosis.timeline
    out: Facts = {"vLLM": ("release", _at(tl, tl.vllm_version, "vllm_version"))}
    for name in ("torch", "CUDA (torch build)", "CUDA runtime", "NVIDIA driver"):
        out[name] = ("release", s.runtime.get(name))
    fixes = "; ".join(f.value for f in s.fixes) if s.fixes else None
    first = s.fixes[0] if s.fixes else None
    out["dsv4ctl fixes"] = ("release", Seen(fixes, first.source, first.line) if first and fixes is not None else None)
    return out


def parallel_facts(tl: StartupTimeline) -> Facts:
    sizes = (tl.tensor_parallel_size, tl.pipeline_parallel_size, tl.data_parallel_size)
    out: Facts = {}
    if all(n is not None for n in sizes):
        tp, pp, dp = sizes
        out["GPUs (TP x PP x DP)"] = ("parallel", _at(tl, f"{tp * pp * dp} (TP{tp} PP{pp} DP{dp})",
                                                        "engine_config", "nondefault_args"))
    else:
        out["GPUs (TP x PP x DP)"] = ("parallel", None)
    return out


def model_facts(tl: StartupTimeline) -> Facts:
    return {
        "model": ("model", _at(tl, tl.model, "model", "engine_config", "nondefault_args")),
        "architecture": ("model", _at(tl, tl.architecture, "architecture")),
    }


def arg_facts(tl: StartupTimeline) -> Facts:
    ref = tl.refs.get("nondefault_args")
    out: Facts = {}
    for name, value in tl.serve_args.items():
        if name in _SKIP_ARGS:
            continue
        out[arg_flag(name)] = (arg_category(name), Seen(arg_text(value), ref.source if ref else None,
                                                        ref.line if ref else None))
    return out


def env_facts(s: StartRead) -> Facts:
    return {f"env {name}": ("env", seen) for name, seen in s.env.items()}


def facts_of(s: StartRead) -> Facts:
    """Every fact of one start, by name: (category, what the log shows or None)."""
    tl = s.diagnosis.timeline
    return {**length_facts(tl), **release_facts(s), **parallel_facts(tl), **arg_facts(tl), **env_facts(s),
            **model_facts(tl)}


def shows_args(s: StartRead) -> bool:
    """Whether the start's log has its `non-default args` line: then an argument it lacks is at its default."""
    return "nondefault_args" in s.diagnosis.timeline.refs
