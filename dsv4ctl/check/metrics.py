"""vLLM's /metrics text as numbers: parsed by prometheus_client's own parser, read per engine.

The names are vLLM's (`vllm/v1/metrics/loggers.py`, the same in 0.27.1, 0.32.0, 0.33.0 and 0.34.0 for every
name below except `vllm:admission_rejections`, new after 0.27.1; docs/check.md cites each line). They
are recorded in the API server process, from the outputs and scheduler statistics the engine core
sends (`vllm/v1/engine/async_llm.py`, the output handler's `record(...)`): when the engine core stops,
they stop with it, gauges included. The HTTP counters are prometheus-fastapi-instrumentator's, as
vLLM attaches it (`vllm/entrypoints/serve/instrumentator/metrics.py`): counted when a response ends,
with no in-progress gauge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Gauges, per engine (labels model_name, engine).
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_USAGE = "vllm:kv_cache_usage_perc"  # 1 means 100 percent
# Counters, per engine (the exposition adds `_total`).
PREEMPTIONS = "vllm:num_preemptions_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
STEPS = "vllm:iteration_tokens_total_count"  # the histogram of tokens per engine step: one count per step
# Counters of the API server itself (no engine label).
ADMISSION_REJECTIONS = "vllm:admission_rejections_total"
HTTP_REQUESTS = "http_requests_total"  # labels handler, method, status ("2xx", "4xx", "5xx": grouped)

# What an engine step moves: any of these changing means the engine core worked during the window.
PROGRESS = (GENERATION_TOKENS, PROMPT_TOKENS, STEPS, PREEMPTIONS)
ENGINE_GAUGES = (RUNNING, WAITING, KV_USAGE)
ENGINE_SAMPLES = (*ENGINE_GAUGES, *PROGRESS)


@dataclass(frozen=True)
class Scrape:
    """One /metrics answer: each sample name -> [(labels, value)]."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return name in self.samples

    def total(self, name: str, **match: str) -> float | None:
        """The sum over the samples of `name` whose labels include `match`; None when absent."""
        values = [v for labels, v in self.samples.get(name, ()) if all(labels.get(k) == x for k, x in match.items())]
        return sum(values) if values else None

    def engines(self) -> list[str]:
        """The `engine` label values vLLM reports (one per engine core behind this API server)."""
        seen: list[str] = []
        for name in ENGINE_SAMPLES:
            for labels, _ in self.samples.get(name, ()):
                engine = labels.get("engine", "0")
                if engine not in seen:
                    seen.append(engine)
        return sorted(seen, key=lambda e: (len(e), e))

    def engine_value(self, name: str, engine: str) -> float | None:
        values = [v for labels, v in self.samples.get(name, ()) if labels.get("engine", "0") == engine]
        return sum(values) if values else None

    def http_status_total(self, status: str) -> float | None:
        """Responses of the API server's routes with this grouped status ("5xx"), /metrics and /health excluded
        by vLLM's own instrumentator settings."""
        if not self.has(HTTP_REQUESTS):
            return None
        return self.total(HTTP_REQUESTS, status=status) or 0.0


def parse_metrics(text: str) -> Scrape:
    """Parse Prometheus text exposition with prometheus_client's parser (vLLM's own dependency).

    Raises ValueError for text that is not an exposition (an HTML error page, a truncated answer)."""
    from prometheus_client.parser import text_string_to_metric_families

    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return Scrape(samples)
