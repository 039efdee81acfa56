"""vLLM 0.34+'s measured ("extensible") KV cache, mirrored: which launches use it, and how it sizes the cache.

Which mode (`sizing_mode`; vllm==0.34.0 `VllmConfig._resolve_extensible_kv_cache`, `config/vllm.py:3180-3269`): on
for CUDA/ROCm unless `--kv-cache-memory-bytes` (`:3203-3207`), `--num-gpu-blocks-override` (`:3208-3212`), elastic
EP (`:3213-3217`), a KV connector sharing the cache by legacy CUDA IPC or its own memory pool (`:3218-3230`, not
read here: a connector's access kind is not a flag) or `--no-enable-extensible-kv-cache`; asked for (`--enable-...`)
where unsupported it is refused (`:3263`). Releases before 0.34 have only the estimate.

How it sizes (vllm==0.34.0):
- `gpu_memory_utilization` resolves to 1.0 unless given (`config/cache.py:494-501`); the startup refusal "Free memory
  ... is less than desired GPU memory utilization" is skipped (`v1/worker/utils.py:783-796`);
- a tentative plan against the reservation `ceil(total x util) - non-KV` (the profile run, no CUDA-graph term:
  `v1/worker/gpu/model_runner.py:1121-1125`), whose auto-fit is only the upper bound of the final one;
- after warm-up and CUDA-graph capture each worker measures (`measure_kv_cache_bytes`,
  `v1/worker/extensible_kv_cache.py:592-618`)

      available = min(requested - non_kv_used, free + committed - max(1 GiB, 0.75 x peak)) - max(peak, torch_growth)

  and takes the blocks whose granule-rounded footprint fits it (`blocks_within`, `:305-318`); the engine keeps the
  least over its workers (`_min_across_ranks`, `v1/worker/gpu_worker.py:1226-1238`), at most the capacity;
- `finalize_extensible_kv_cache` (`v1/core/kv_cache_planning.py:1864-1906`): auto-fit again on (N - 1) x
  bytes_per_block with the tentative length as the upper bound, then the admission check on the same memory
  (`shrink_kv_cache_configs`, `:1827-1861`): an explicit --max-model-len that does not fit is refused only then,
  after CUDA-graph capture.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsv4ctl.planning.mirror.kv_planner import version_key
from dsv4ctl.units import GiB, MiB, cdiv

MEASURED = "measured"
ESTIMATE = "estimate"
FIRST_MEASURED_RELEASE = (0, 34, 0)
# vllm==0.34.0 v1/worker/extensible_kv_cache.py:64-65 (CUDA; ROCm keeps a 3 GiB floor).
MARGIN_FLOOR_BYTES = 1 * GiB
MARGIN_FRACTION = 0.75
# ExtensibleTensor's commit granule on CUDA: the driver's granularity floored at 2 MiB
# (vllm==0.34.0 vllm/utils/extensible_tensor.py:23-31); the CUDA driver's minimum granularity is 2 MiB.
COMMIT_GRANULE_BYTES = 2 * MiB
# config/cache.py:186 (0.34), the estimate mode's default; every earlier release's only default (0.33 `:215`).
ESTIMATE_DEFAULT_UTILIZATION = 0.92
MEASURED_DEFAULT_UTILIZATION = 1.0


@dataclass(frozen=True)
class SizingMode:
    """How the launch's vLLM sizes its KV cache, why, and the `gpu_memory_utilization` it resolves."""

    mode: str  # MEASURED | ESTIMATE
    why: str
    utilization: float  # the resolved value
    utilization_given: bool  # False: the release's default for the mode
    refusal: str | None = None  # vLLM's error when the measured mode is asked for where it cannot run
    release: str = ""  # the release planned

    @property
    def measured(self) -> bool:
        return self.mode == MEASURED

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "why": self.why, "gpu_memory_utilization": self.utilization,
                "gpu_memory_utilization_given": self.utilization_given}


def has_measured_mode(version: str) -> bool:
    return version_key(version) >= FIRST_MEASURED_RELEASE


def sizing_mode(
    version: str, *, gpu_memory_utilization: float | None, kv_cache_memory_bytes: int | None = None,
    num_gpu_blocks_override: int | None = None, enable_extensible_kv_cache: bool | None = None,
    enable_elastic_ep: bool = False, cuda: bool = True,
) -> SizingMode:
    """The mode `_resolve_extensible_kv_cache` settles on for these flags (`cuda`: a CUDA/ROCm launch)."""
    def made(mode: str, why: str, refusal: str | None = None) -> SizingMode:
        default = MEASURED_DEFAULT_UTILIZATION if mode == MEASURED else ESTIMATE_DEFAULT_UTILIZATION
        given = gpu_memory_utilization is not None
        return SizingMode(mode, why, float(gpu_memory_utilization) if given else default, given, refusal, version)

    if not has_measured_mode(version):
        return made(ESTIMATE, f"vLLM {version} sizes the KV cache from its profile-run estimate only")
    unsupported = None
    if not cuda:
        unsupported = "it is only supported on CUDA and ROCm"
    elif kv_cache_memory_bytes is not None:
        unsupported = "it sizes the KV cache from measured memory, which kv_cache_memory_bytes overrides"
    elif num_gpu_blocks_override is not None:
        unsupported = "it sizes the KV cache from measured memory, which num_gpu_blocks_override overrides"
    elif enable_elastic_ep:
        unsupported = ("elastic EP scale-up skips warmup and reuses the profiled KV cache size, so no measurement "
                       "would size the cache")
    if enable_extensible_kv_cache and unsupported is not None:  # config/vllm.py:3262-3263
        return made(ESTIMATE, "refused", f"enable_extensible_kv_cache: {unsupported}.")
    if enable_extensible_kv_cache is False:
        return made(ESTIMATE, "--no-enable-extensible-kv-cache: sized from the profile-run estimate, as before 0.34")
    if unsupported is not None:
        return made(ESTIMATE, f"the extensible KV cache is off: {unsupported}")
    return made(MEASURED, f"vLLM {version} measures the KV cache after CUDA-graph capture and warm-up (the extensible "
                          "KV cache, on by default on CUDA; --no-enable-extensible-kv-cache or --kv-cache-memory-bytes "
                          "sizes it as before)")


def measure_kv_cache_bytes(
    *, init_free_memory: int, free_memory: int, committed_bytes: int, requested_memory: int,
    transient_peak_bytes: int = 0, torch_reserve_growth_bytes: int = 0,
    margin_floor_bytes: int = MARGIN_FLOOR_BYTES, margin_fraction: float = MARGIN_FRACTION,
) -> int:
    """vllm==0.34.0 `measure_kv_cache_bytes` (`v1/worker/extensible_kv_cache.py:592-618`), line by line."""
    non_kv_used = init_free_memory - free_memory - committed_bytes
    headroom = free_memory + committed_bytes
    margin = max(margin_floor_bytes, int(transient_peak_bytes * margin_fraction))
    available = min(requested_memory - non_kv_used, headroom - margin)
    available -= max(transient_peak_bytes, torch_reserve_growth_bytes)
    return max(available, 0)


def sizing_margin(transient_peak_bytes: int) -> int:
    """The margin kept below the device headroom: max(1 GiB, 0.75 x the transient peak)."""
    return max(MARGIN_FLOOR_BYTES, int(transient_peak_bytes * MARGIN_FRACTION))


def physical_bytes_for(num_blocks: int, bytes_per_block: int, granule: int = COMMIT_GRANULE_BYTES) -> int:
    """`ExtensibleKVCache.physical_bytes_for` of a block-outermost cache (one segment, DeepSeek-V4's layout)."""
    return cdiv(num_blocks * bytes_per_block, granule) * granule


def blocks_within(num_bytes: int, bytes_per_block: int, capacity_blocks: int, granule: int = COMMIT_GRANULE_BYTES) -> int:
    """`ExtensibleKVCache.blocks_within` (`:305-318`): the most blocks whose granule-rounded footprint fits."""
    num_blocks = min(num_bytes // bytes_per_block, capacity_blocks)
    if num_blocks <= 0:
        return max(num_blocks, 0)
    # The footprint only grows with the count: the largest count whose rounded bytes fit, as the release's loop finds.
    return min(num_blocks, (num_bytes // granule) * granule // bytes_per_block)
