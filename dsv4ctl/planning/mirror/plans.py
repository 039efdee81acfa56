"""vLLM's KV planner over one request's layers, its answers kept: auto-fit lengths and the memory a full context
needs (the what-if rows of other batch sizes ask it again: plan/what_if.py)."""

from __future__ import annotations

from typing import Any

from dsv4ctl.planning.mirror.kv_planner import KvPlan, needed_bytes, plan_kv_cache
from dsv4ctl.planning.mirror.kv_specs import LayerKvSpec
from dsv4ctl.planning.mirror.refusals import RefusalTexts


class Planner:
    """vLLM's KV planner over this request's layers, each answer kept (the safe-length rule and the what-if table
    ask for the same plans again)."""

    def __init__(self, specs: dict[str, LayerKvSpec], worker_layers: list[set[str]], rules: Any) -> None:
        self.specs, self.worker_layers, self.rules = specs, worker_layers, rules
        self._plans: dict[tuple, KvPlan] = {}

    def __call__(
        self, memory: list[int], *, length: int, auto: bool, tokens_in_flight: int, texts: RefusalTexts | None = None
    ) -> KvPlan:
        key = (tuple(memory), length, auto, tokens_in_flight, texts)
        if key not in self._plans:
            self._plans[key] = plan_kv_cache(
                self.specs, self.worker_layers, memory, original_max_model_len=length, autofit=auto,
                max_in_flight_tokens=tokens_in_flight, rules=self.rules, texts=texts,
            )
        return self._plans[key]

    def autofit(self, memory: list[int], length: int, tokens_in_flight: int) -> int:
        return autofit_len(self(memory, length=length, auto=True, tokens_in_flight=tokens_in_flight))


def autofit_len(plan: KvPlan) -> int:
    """The length an auto-fit plan ends with; 0 when not even one token fits."""
    return 0 if plan.error else plan.max_model_len


def full_context_bytes(plan: KvPlan, length: int) -> int:
    """`--kv-cache-memory-bytes` that holds one request of `length` tokens on every worker (plus the null block
    on releases that hold one back)."""
    rules = plan.rules
    return max(
        needed_bytes(w.groups, length, plan.max_in_flight_tokens, rules) + (w.bytes_per_block if rules.null_block else 0)
        for w in plan.workers
    )


def finalize_measured(
    planner: Planner, measured_blocks: int, capacity_blocks: int, length: int, auto: bool, tokens_in_flight: int,
    texts: RefusalTexts,
) -> tuple[int, KvPlan]:
    """vllm==0.34.0 `finalize_extensible_kv_cache` (`v1/core/kv_cache_planning.py:1864-1906`): the blocks every worker
    keeps (the least measured, at most the capacity) and the plan on them: auto-fit again with `length` (the tentative
    auto-fit) as its upper bound, or the explicit length checked, on (N - 1) x bytes_per_block (the plan holds the
    null block back itself); `texts`: the after-warm-up refusals."""
    blocks = min(measured_blocks, capacity_blocks)
    probe = planner([1 << 40] * len(planner.worker_layers), length=length, auto=auto, tokens_in_flight=tokens_in_flight)
    memory = [blocks * w.bytes_per_block for w in probe.workers]
    return blocks, planner(memory, length=length, auto=auto, tokens_in_flight=tokens_in_flight, texts=texts)
