"""KV-cache planning for DeepSeek-V4 on vLLM: the checkpoint, a mirror of vLLM's planner, and `fit-length`.

The one face the rest of dsv4ctl imports; the rooms behind it (docs/architecture.md):

    checkpoint/  what a checkpoint is: geometry (config.json values), weights from the hub or the local cache
    mirror/      vLLM's KV planner, mirrored per release: specs, planner, releases, startup plans
    plan/        the plan dsv4ctl makes: request, inputs, memory, safe length, flags, `plan_fit`, FitResult

Light on purpose: importing this package never imports vLLM, torch or pynvml.

    load_geometry(model) -> Dsv4Geometry          model id, checkpoint dir or config.json
    plan_fit(FitRequest(...), snapshot, log_facts) -> FitResult

A startup log's figures come in as data (`dsv4ctl.logs.facts.LogCalibration`); reading a log is the caller's
(`dsv4ctl.advice.read_log_facts`).
"""

from dsv4ctl.logs.facts import LogCalibration
from dsv4ctl.planning.checkpoint.geometry import Dsv4Geometry, builtin_model_ids
from dsv4ctl.planning.checkpoint.load import load_geometry
from dsv4ctl.planning.mirror import startup_plans
from dsv4ctl.planning.mirror.kv_planner import MIRRORED_VLLM_VERSION
from dsv4ctl.planning.mirror.kv_specs import DSV4_BLOCK_SIZE
from dsv4ctl.planning.mirror.startup_plans import StartupPlan
from dsv4ctl.planning.mirror.versions import installed_vllm_version
from dsv4ctl.planning.plan import calibration
from dsv4ctl.planning.plan.calibration import record_from_serve
from dsv4ctl.planning.plan.fit import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    STALE_LENGTH_RELEASES,
    THINK_MAX_CONTEXT,
    FitRequest,
    FitResult,
    Margin,
    WhatIfRow,
    checkpoint_refusal,
    parse_margin,
    parse_max_model_len,
    parse_speculative_config,
    plan_fit,
    speculative_tokens,
)
from dsv4ctl.planning.plan.safe_length import SafeLength, safe_length_scaled
from dsv4ctl.planning.plan.v41 import engram_config_refusal, v41_launch_refusal

__all__ = [
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DSV4_BLOCK_SIZE",
    "MIRRORED_VLLM_VERSION",
    "STALE_LENGTH_RELEASES",
    "THINK_MAX_CONTEXT",
    "Dsv4Geometry",
    "FitRequest",
    "FitResult",
    "LogCalibration",
    "Margin",
    "SafeLength",
    "StartupPlan",
    "WhatIfRow",
    "builtin_model_ids",
    "calibration",
    "checkpoint_refusal",
    "installed_vllm_version",
    "load_geometry",
    "parse_margin",
    "parse_max_model_len",
    "parse_speculative_config",
    "plan_fit",
    "record_from_serve",
    "safe_length_scaled",
    "speculative_tokens",
    "startup_plans",
    "engram_config_refusal",
    "v41_launch_refusal",
]
