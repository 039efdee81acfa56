"""A vLLM logits processor for the engine tier: a request carrying `vllm_xargs: {"compile": N}` makes the engine
compile a fresh function with torch.compile (Inductor, C++ on CPU) inside its step, once: a real compile during
serving, which stalls every running request while it lasts. Loaded with `--logits-processors
compile_on_request:CompileOnRequest` (vLLM's `<module>:<type>`, vllm/v1/sample/logits_processor/__init__.py)."""

from __future__ import annotations

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor


class CompileOnRequest(LogitsProcessor):
    def __init__(self, vllm_config, device, is_pin_memory) -> None:
        self.pending: int | None = None
        self.done = False

    def is_argmax_invariant(self) -> bool:
        return False  # so that vLLM calls apply() in greedy sampling too

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        for _index, params, _prompt, _output in batch_update.added:
            size = (params.extra_args or {}).get("compile")
            if size and not self.done:
                self.pending = int(size)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if self.pending is None:
            return logits
        size, self.pending, self.done = self.pending, None, True

        def shaped(x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.gelu(x * 3.0 + 1.0).softmax(-1).cumsum(-1)

        torch.compile(shaped, backend="inductor", dynamic=False)(torch.randn(size, 512))
        return logits
