"""KV-cache planning for DeepSeek-V4 on vLLM: geometry, a mirror of vLLM's planner, and `fit-length`.

Light on purpose: importing this package never imports vLLM, torch or pynvml.

    load_geometry(model) -> Dsv4Geometry          model id, checkpoint dir or config.json
    plan_fit(FitRequest(...), snapshot, log_facts) -> FitResult

A startup log's figures come in as data (`dsv4ctl.logs.facts.LogCalibration`); reading a log is the caller's
(`dsv4ctl.advice.read_log_facts`).
"""

from dsv4ctl.logs.facts import LogCalibration
from dsv4ctl.planning.fit import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    THINK_MAX_CONTEXT,
    FitRequest,
    FitResult,
    Margin,
    WhatIfRow,
    parse_margin,
    parse_max_model_len,
    parse_speculative_config,
    plan_fit,
)
from dsv4ctl.planning.geometry import Dsv4Geometry, builtin_model_ids, load_geometry
from dsv4ctl.planning.kv_planner import MIRRORED_VLLM_VERSION

__all__ = [
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "MIRRORED_VLLM_VERSION",
    "THINK_MAX_CONTEXT",
    "Dsv4Geometry",
    "FitRequest",
    "FitResult",
    "LogCalibration",
    "Margin",
    "WhatIfRow",
    "builtin_model_ids",
    "load_geometry",
    "parse_margin",
    "parse_max_model_len",
    "parse_speculative_config",
    "plan_fit",
]
