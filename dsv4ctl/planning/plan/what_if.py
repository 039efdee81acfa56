"""The what-if rows of `fit-length`: auto-fit and the full context's memory at the usual batch sizes and this one,
each asked of vLLM's planner (mirror/plans.py)."""

from __future__ import annotations

from dsv4ctl.planning.mirror.kv_planner import max_concurrent_batches
from dsv4ctl.planning.mirror.plans import Planner, autofit_len, full_context_bytes
from dsv4ctl.planning.plan.result import WhatIfRow

WHAT_IF_BATCHED_TOKENS = (2048, 4096, 8192, 16384)


def what_if_rows(
    planner: Planner, positive: list[int], mnbt: int, async_on: bool, model_max: int, pp: int
) -> list[WhatIfRow]:
    """Auto-fit and the full context's memory at the usual batch sizes and this one."""
    rows = []
    for row_mnbt in sorted(set(WHAT_IF_BATCHED_TOKENS) | {mnbt}):
        row_in_flight = max_concurrent_batches(async_on, pp) * row_mnbt
        row_plan = planner(positive, length=model_max, auto=True, tokens_in_flight=row_in_flight)
        rows.append(
            WhatIfRow(
                max_num_batched_tokens=row_mnbt,
                max_in_flight_tokens=row_in_flight,
                autofit_max_model_len=autofit_len(row_plan),
                full_context_kv_memory_bytes=full_context_bytes(row_plan, model_max),
                current=row_mnbt == mnbt,
            )
        )
    return rows
