"""The launch as its log states it: the engine's config line and `non-default args`, read into the timeline.

vLLM prints both as Python values (vllm==0.32.0 v1/engine/core.py "Initializing a V1 LLM engine (v%s) with config: %s",
the repr of each field; vllm/entrypoints/utils.py "non-default args: %s", a dict): the model is read back as Python
reads it, so a local path with spaces or quotes stays whole.
"""

from __future__ import annotations

import ast
import copy
import functools
from typing import Any, Callable

from dsv4ctl import re_cache
from dsv4ctl.logs.reader import LogLine
from dsv4ctl.logs.timeline_model import LineRef, StartupTimeline

# Takes a model name and how faithful its source is (`StartupTracker._model`).
SetModel = Callable[[str, int], bool]

_ENGINE_FIELDS = {
    # The model as Python's repr writes a str: in single quotes, in double quotes when it holds a single quote.
    "model": re_cache.compile(r"""\bmodel=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""),
    "max_seq_len": re_cache.compile(r"\bmax_seq_len=([0-9]+)"),
    "tp": re_cache.compile(r"\btensor_parallel_size=([0-9]+)"),
    "pp": re_cache.compile(r"\bpipeline_parallel_size=([0-9]+)"),
    "dp": re_cache.compile(r"\bdata_parallel_size=([0-9]+)"),
    "kv_dtype": re_cache.compile(r"\bkv_cache_dtype=([A-Za-z0-9_]+)"),
    "eager": re_cache.compile(r"\benforce_eager=(True|False)"),
    "mode": re_cache.compile(r"'mode': (?:<CompilationMode\.([A-Z_]+)[^>]*>|([0-9]+)|'([A-Za-z_]+)')"),
    "cg_mode": re_cache.compile(r"'cudagraph_mode': (?:<CUDAGraphMode\.([A-Z_]+)[^>]*>|'([A-Za-z_]+)')"),
    # SpeculativeConfig.__repr__ (vllm==0.34.0 vllm/config/speculative.py:1829-1842): "SpeculativeConfig(method='dspark', …"
    "spec": re_cache.compile(r"speculative_config=SpeculativeConfig\(method='([^']*)'"),
}
_COMPILATION_MODE_NAMES = {"0": "NONE", "1": "STOCK_TORCH_COMPILE", "2": "DYNAMO_TRACE_ONCE", "3": "VLLM_COMPILE"}

_ARG_FIELDS = {
    "model": re_cache.compile(r"'model(?:_tag)?': '([^']*)'"),
    "max_model_len": re_cache.compile(r"'max_model_len': (-?[0-9]+|'[^']*')"),
    "kv_cache_dtype": re_cache.compile(r"'kv_cache_dtype': '([^']*)'"),
    "tp": re_cache.compile(r"'tensor_parallel_size': ([0-9]+)"),
    "pp": re_cache.compile(r"'pipeline_parallel_size': ([0-9]+)"),
    "dp": re_cache.compile(r"'data_parallel_size': ([0-9]+)"),
    "ep": re_cache.compile(r"'enable_expert_parallel': (True|False)"),
    "eager": re_cache.compile(r"'enforce_eager': (True|False)"),
}


def read_engine_config(tl: StartupTimeline, version: str, config: str, line: LogLine, set_model: SetModel) -> None:
    """The engine's `Initializing a V1 LLM engine (vX) with config: …` line: the release, the model, the length, the
    parallel sizes, the kv-cache dtype, eager and the compilation modes."""
    tl.vllm_version = version
    tl.refs["vllm_version"] = LineRef.of(line)
    tl.refs["engine_config"] = LineRef.of(line)
    f = _ENGINE_FIELDS
    if m := f["model"].search(config):
        set_model(literal_str(m.group(1)), 2)
    if m := f["max_seq_len"].search(config):
        tl.max_model_len = int(m.group(1))
        tl.refs["max_model_len"] = LineRef.of(line)
    if m := f["tp"].search(config):
        tl.tensor_parallel_size = int(m.group(1))
    if m := f["pp"].search(config):
        tl.pipeline_parallel_size = int(m.group(1))
    if m := f["dp"].search(config):
        tl.data_parallel_size = int(m.group(1))
    if m := f["kv_dtype"].search(config):
        tl.kv_cache_dtype = m.group(1)
    if m := f["eager"].search(config):
        tl.enforce_eager = m.group(1) == "True"
    if m := f["mode"].search(config):
        name = m.group(1) or m.group(3) or _COMPILATION_MODE_NAMES.get(m.group(2) or "", m.group(2))
        tl.compilation_mode = name
    if m := f["cg_mode"].search(config):
        tl.cudagraph_mode = m.group(1) or m.group(2)
    if m := f["spec"].search(config):
        tl.speculative_method = m.group(1)


def read_nondefault(tl: StartupTimeline, args: str, line: LogLine, set_model: SetModel) -> None:
    """`non-default args: {…}`: the launch's own flags (a Python dict, read as one), the model and the length given."""
    f = _ARG_FIELDS
    tl.refs["nondefault_args"] = LineRef.of(line)
    parsed = _literal_dict(args.strip())
    if parsed is not None:
        tl.serve_args = copy.deepcopy(parsed)
        model = parsed.get("model") or parsed.get("model_tag")
        if isinstance(model, str):
            set_model(model, 3)
        spec = parsed.get("speculative_config")
        if isinstance(spec, dict) and isinstance(spec.get("method"), str):
            tl.speculative_method = tl.speculative_method or spec["method"]
    elif m := f["model"].search(args):
        set_model(m.group(1), 3)
    if m := f["max_model_len"].search(args):
        tl.max_model_len_arg = m.group(1).strip("'")
        tl.refs["max_model_len_arg"] = LineRef.of(line)
    if m := f["kv_cache_dtype"].search(args):
        tl.kv_cache_dtype = tl.kv_cache_dtype or m.group(1)
    if (m := f["tp"].search(args)) and tl.tensor_parallel_size is None:
        tl.tensor_parallel_size = int(m.group(1))
    if (m := f["pp"].search(args)) and tl.pipeline_parallel_size is None:
        tl.pipeline_parallel_size = int(m.group(1))
    if (m := f["dp"].search(args)) and tl.data_parallel_size is None:
        tl.data_parallel_size = int(m.group(1))
    if m := f["ep"].search(args):
        tl.enable_expert_parallel = m.group(1) == "True"
    if (m := f["eager"].search(args)) and tl.enforce_eager is None:
        tl.enforce_eager = m.group(1) == "True"


@functools.lru_cache(maxsize=16)
def _literal_dict(text: str) -> dict[str, Any] | None:
    """`non-default args` read as the dict it is (None when it is not one); kept for the next start, which a crash loop
    launches with the same args (the caller copies it)."""
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return {str(k): v for k, v in parsed.items()} if isinstance(parsed, dict) else None


def literal_str(text: str) -> str:
    """A str as Python's repr wrote it, read back ("" when it is not one)."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return ""
    return value if isinstance(value, str) else ""
