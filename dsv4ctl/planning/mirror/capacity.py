"""The KV-cache figures vLLM logs after sizing the cache, from the planner: what a log should say.

vLLM 0.32 `v1/core/kv_cache_utils.py` logs, once the KV cache is sized,

    "%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"

with `max_concurrency = num_blocks / blocks_per_request` (`get_max_concurrency_for_kv_cache_config`, L1195: a
request at max_model_len takes `cdiv(max_memory_usage, page)` blocks of each group) and
`tokens = int(max_concurrency * max_model_len)` (`get_kv_cache_capacity`); the length is the engine's
max_model_len after auto-fit. `log_figures` computes the same three numbers with the planner, so a
log's numbers can be checked against it (and fixtures are written from it).
"""

from __future__ import annotations

from dataclasses import dataclass

from dsv4ctl.planning.checkpoint.load import load_geometry
from dsv4ctl.planning.mirror.kv_planner import blocks_per_request, max_concurrent_batches, plan_kv_cache
from dsv4ctl.planning.mirror.kv_specs import resolve_kv_layout
from dsv4ctl.planning.mirror.layers import build_specs, worker_layer_sets


@dataclass(frozen=True)
class LogFigures:
    max_model_len: int  # after auto-fit (or the explicit length)
    autofit: bool
    kv_cache_tokens: int  # "KV cache size: N tokens"
    max_concurrency: float  # "Maximum concurrency for max_model_len tokens per request: Cx"
    num_blocks: int
    error: str | None  # vLLM's refusal, when it would refuse


def log_figures(
    model: str,
    available_kv_bytes: int,
    *,
    max_model_len: int | None = None,
    max_num_batched_tokens: int = 8192,
    kv_cache_dtype: str = "fp8",
    async_scheduling: bool = True,
    pipeline_parallel_size: int = 1,
) -> LogFigures:
    """What vLLM logs for `model` with this much KV memory per worker (max_model_len None: auto)."""
    geometry = load_geometry(model)
    layout = resolve_kv_layout(kv_cache_dtype, None, None)
    specs = build_specs(geometry, layout, num_speculative_tokens=0, block_size=None)
    in_flight = max_concurrent_batches(async_scheduling, pipeline_parallel_size) * max_num_batched_tokens
    autofit = max_model_len is None or max_model_len == -1  # FitRequest.is_auto
    plan = plan_kv_cache(
        specs,
        worker_layer_sets(specs, geometry, pipeline_parallel_size),
        [available_kv_bytes] * pipeline_parallel_size,
        original_max_model_len=geometry.model_max_model_len if autofit else int(max_model_len or 0),
        autofit=autofit,
        max_in_flight_tokens=in_flight,
    )
    worker = plan.workers[plan.limiting_pp_rank]
    per_request = blocks_per_request(worker.groups, plan.max_model_len, in_flight)
    concurrency = worker.num_blocks / per_request if per_request else 0.0
    return LogFigures(
        max_model_len=plan.max_model_len,
        autofit=autofit,
        kv_cache_tokens=int(concurrency * plan.max_model_len),
        max_concurrency=concurrency,
        num_blocks=worker.num_blocks,
        error=plan.error,
    )
