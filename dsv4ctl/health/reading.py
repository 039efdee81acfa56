"""What the API server's process knows of its engines, read in the process: vLLM's engine client and the counters
vLLM's stat logger keeps in prometheus_client's registry (the numbers its /metrics shows, without the request).

Read from vLLM's objects, checked in the releases 0.27.1 to 0.34.0 (vllm/v1/engine/async_llm.py `errored`,
`output_processor`; vllm/v1/engine/output_processor.py `get_num_unfinished_requests`; vllm/v1/engine/core_client.py
`core_engines`, `_call_utility_async`, `engine_ranks_managed`; vllm/v1/engine/core.py `EngineCore.is_sleeping`, the
utility the calls ask for). What a release lacks is unseen, never an error.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dsv4ctl.check import metrics as m
from dsv4ctl.health.judgement import EngineLook

CALL = "is_sleeping"  # EngineCore.is_sleeping: a utility every release has, answered between engine steps


def is_dead(client: Any) -> str | None:
    try:
        if bool(getattr(client, "errored", False)):
            return "vLLM's engine client says its engine is dead (EngineClient.errored; vLLM's /health answers 503)"
    except Exception:  # noqa: BLE001 - a property of another release: unseen
        return None
    return None


def pending(client: Any) -> int | None:
    processor = getattr(client, "output_processor", None)
    count = getattr(processor, "get_num_unfinished_requests", None)
    try:
        return int(count()) if count is not None else None
    except Exception:  # noqa: BLE001
        return None


def counters(registry: Any) -> tuple[float, ...] | None:
    """vLLM's progress counters (check.metrics.PROGRESS), summed over engines; None when vLLM keeps none."""
    collectors = getattr(registry, "_names_to_collectors", None)
    values: list[float] = []
    seen = False
    for name in m.PROGRESS:
        collector = collectors.get(name) if isinstance(collectors, dict) else None
        total = 0.0
        if collector is not None:
            for family in collector.collect():
                for sample in family.samples:
                    if sample.name == name:
                        total += float(sample.value)
                        seen = True
        values.append(total)
    return tuple(values) if seen else None


class EngineCalls:
    """One call at a time to each engine core the client manages; when each last answered, and the one outstanding."""

    def __init__(self, client: Any) -> None:
        core = getattr(client, "engine_core", None)
        self._core = core
        self._call = getattr(core, "_call_utility_async", None)
        identities = list(getattr(core, "core_engines", None) or ())
        local = _local_count(client, len(identities))
        self.engines = [(ident, int.from_bytes(ident, "little"), i < local) for i, ident in enumerate(identities)]
        self._answered: dict[bytes, float] = {}
        self._paused: dict[bytes, bool] = {}
        self._outstanding: dict[bytes, tuple[float, asyncio.Future[Any]]] = {}

    @property
    def seen(self) -> bool:
        return self._call is not None and bool(self.engines)

    def tick(self, now: float) -> tuple[EngineLook, ...]:
        """Collect the answers that came, send a call to each engine with none outstanding; the looks."""
        if not self.seen:
            return ()
        looks = []
        for ident, rank, local in self.engines:
            out = self._outstanding.get(ident)
            if out is not None and out[1].done():
                failed = out[1].cancelled() or out[1].exception() is not None  # an error is an answer too
                self._paused[ident] = not failed and out[1].result() is True
                self._answered[ident] = now
                del self._outstanding[ident]
                out = None
            if out is None:
                task = asyncio.ensure_future(self._call(CALL, engine=ident))
                self._outstanding[ident] = out = (now, task)
            looks.append(EngineLook(rank, local, self._answered.get(ident), out[0], self._paused.get(ident, False)))
        return tuple(looks)


def _local_count(client: Any, managed: int) -> int:
    """How many of the managed engines (the first ones) run on this node: vLLM's --data-parallel-size-local."""
    config = getattr(getattr(client, "vllm_config", None), "parallel_config", None)
    local = getattr(config, "data_parallel_size_local", None)
    return managed if not isinstance(local, int) or local <= 0 else min(local, managed)
