"""vLLM's KV-cache refusals, word for word, per release: the texts `plan_kv_cache` returns where vLLM raises.

vLLM 0.27.1-0.33.0 raise the same three texts (`_check_enough_kv_cache_memory`, vllm==0.33.0
`v1/core/kv_cache_planning.py:50-87`; vllm==0.32.0 `v1/core/kv_cache_utils.py:1003-1040`; the auto-fit refusal
vllm==0.33.0 `kv_cache_planning.py:1380-1384`, the same words in 0.27.1 `kv_cache_utils.py:2027-2031`).
vLLM 0.34.0 ends each with a hint that depends on the sizing mode (`_more_kv_cache_memory_hint`,
vllm==0.34.0 `v1/core/kv_cache_planning.py:64-96`; the checks `:99-132`; auto-fit `:1425-1439`): the
estimate mode keeps the old advice, the measured ("extensible") mode says what the cache gets, before and
after CUDA-graph capture and warm-up.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsv4ctl.units import format_gib_vllm

SEE_DOCS = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
# vllm==0.34.0 v1/core/kv_cache_planning.py:92-96 (also every earlier release's "No available memory" advice).
ESTIMATE_HINT = ("Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU "
                 "memory reservation on the CPU backend, despite its name).")
# vllm==0.34.0 v1/core/kv_cache_planning.py:1428-1434: auto-fit after the measurement found no room.
AFTER_WARMUP_AUTOFIT_HINT = ("CUDA graph capture and warmup left no memory for the KV cache. Increase "
                             "`gpu_memory_utilization`, reduce the memory CUDA graphs take (fewer or smaller capture "
                             "sizes in the compilation config), or use more GPUs.")


def kv_memory_hint(*, measured: bool, utilization: float, after_warmup: bool = False) -> str:
    """vllm==0.34.0 `_more_kv_cache_memory_hint` (`v1/core/kv_cache_planning.py:64-96`); `utilization` is the
    resolved `gpu_memory_utilization` (1.0 by default in the measured mode)."""
    if not measured:
        return ESTIMATE_HINT
    used_by, graphs_hint = "the model and its activations", ""
    if after_warmup:
        used_by = "the model, its activations, CUDA graphs and warmup"
        graphs_hint = " CUDA graphs take less with fewer or smaller capture sizes in the compilation config."
    if utilization < 1.0:
        return (f"The KV cache gets what is left after {used_by} within `gpu_memory_utilization`={utilization}; "
                "increase it (with the extensible KV cache it defaults to 1.0) or decrease `max_model_len` or "
                f"`max_num_seqs`.{graphs_hint}")
    return (f"The extensible KV cache already takes all device memory left after {used_by}; decrease `max_model_len` "
            f"or `max_num_seqs`, or the model needs a device with more memory.{graphs_hint}")


@dataclass(frozen=True)
class RefusalTexts:
    """The refusals of one release in one sizing mode (and, in the measured mode, before or after warm-up)."""

    hinted: bool  # 0.34+: the texts end with `hint`; before, with the fixed advice of 0.27-0.33
    hint: str = ESTIMATE_HINT
    autofit_hint: str = ESTIMATE_HINT

    def no_memory(self) -> str:
        if not self.hinted:
            return f"No available memory for the cache blocks. {ESTIMATE_HINT} {SEE_DOCS}"
        return f"No available memory for the cache blocks. {self.hint} {SEE_DOCS}"

    def admission(self, max_model_len: int, needed: int, available: int, estimated: int) -> str:
        estimated_msg = (f"Based on the available memory, the estimated maximum model length is {estimated}. "
                         if estimated > 0 else "")
        head = (f"To serve at least one request with the model's max seq len ({max_model_len}), "
                f"({format_gib_vllm(needed)} GiB KV cache is needed, which is larger than the available KV cache "
                f"memory ({format_gib_vllm(available)} GiB). {estimated_msg}")
        if not self.hinted:
            return (f"{head}Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) "
                    f"or decreasing `max_model_len` when initializing the engine. {SEE_DOCS}")
        return f"{head}{self.hint} Decreasing `max_model_len` also reduces what is needed. {SEE_DOCS}"

    def cannot_autofit(self) -> str:
        head = "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token."
        if not self.hinted:
            return f"{head} Try increasing `gpu_memory_utilization`."
        return f"{head} {self.autofit_hint}"


def refusal_texts(hinted: bool, *, measured: bool = False, utilization: float = 1.0, after_warmup: bool = False) -> RefusalTexts:
    """The texts of a release (`hinted`: 0.34+) in a sizing mode; after warm-up only in the measured mode."""
    if not hinted:
        return RefusalTexts(False)
    hint = kv_memory_hint(measured=measured, utilization=utilization, after_warmup=after_warmup)
    return RefusalTexts(True, hint, AFTER_WARMUP_AUTOFIT_HINT if after_warmup else hint)
