"""Catalogue entries for what vLLM 0.34.0 added to a start: the V1 model runner gone (its switch now refused), the
DeepSeek-V4 attention's grouped output projection (a tensor-parallel size must divide o_groups), and the measured
("extensible") KV cache's own lines worth a note (turned off, a utilization that caps it).

Each pattern is copied from the format string that prints it, cited file:line in vllm==0.34.0 (the wheel unpacked
with `pip download vllm==0.34.0 --no-deps`). The auto-fit and refusal lines of the measured mode are read by the
timeline (logs/timeline_sizing.py) and answered through `autofit_reduced` and `kv_cache_insufficient`.

Kept whole: data, one entry per message (see signatures.py).
"""

from __future__ import annotations

from dsv4ctl.catalogue.signature import Signature

_XKV = "vllm/v1/worker/extensible_kv_cache.py"

SIGNATURES: tuple[Signature, ...] = (
    Signature(
        id="v2_runner_env_refused",
        severity="critical",
        title="VLLM_USE_V2_MODEL_RUNNER={value} is refused: vLLM 0.34 has no V1 model runner",
        meaning=(
            "vLLM 0.34.0 removed the V1 model runner and checks the variable that used to choose between the two: "
            "any value but 1 is an error at startup (1 is only a warning), so the environment of this launch "
            "carries VLLM_USE_V2_MODEL_RUNNER={value} from an older setup."
        ),
        patterns=(
            r"VLLM_USE_V2_MODEL_RUNNER=(?P<value>\S*) is no longer supported: Model Runner V1 has been removed",
        ),
        actions=(
            "Remove the variable from the server's environment (vLLM's own advice: 'Unset this variable'): "
            "env -u VLLM_USE_V2_MODEL_RUNNER vllm serve {model!q}{_serve_all}",
            "Look for where it is set: the container's env, the launch script, a systemd unit or Kubernetes manifest",
        ),
        source="vllm==0.34.0 vllm/platforms/interface.py:1481-1486 (validate_environ: the raise at :1483, called by engine/arg_utils.py:2294)",
        phase="startup",
    ),
    Signature(
        id="v2_runner_env_redundant",
        severity="info",
        role="note",
        title="VLLM_USE_V2_MODEL_RUNNER=1 is set and no longer does anything",
        meaning=(
            "vLLM 0.34.0 has only the V2 model runner: the variable is ignored with this warning, and any other "
            "value would stop the start. Unset it so a later edit cannot turn it into an error."
        ),
        patterns=(r"VLLM_USE_V2_MODEL_RUNNER=1 is redundant and can be unset",),
        actions=("Unset it in the server's environment: env -u VLLM_USE_V2_MODEL_RUNNER vllm serve {model!q}{_serve_all}",),
        source="vllm==0.34.0 vllm/platforms/interface.py:1487-1490 (the warning)",
    ),
    Signature(
        id="dsv4_o_groups_tp",
        severity="critical",
        title="--tensor-parallel-size {tp} does not divide DeepSeek-V4's o_groups ({groups})",
        meaning=(
            "vLLM 0.34.0 builds DeepSeek-V4's attention output projection wo_a as one projection per head group "
            "(DeepseekV4GroupedWoA) and splits the config's o_groups evenly across the tensor-parallel ranks: "
            "{groups} groups do not split into {tp} ranks, and divide() asserts while the model is built "
            "('{groups} is not divisible by {tp}'). Releases before 0.34 floored the division instead. "
            "DeepSeek-V4-Flash has o_groups 8, V4-Pro 16."
        ),
        patterns=(
            r'grouped_wo_a\.py", line [0-9]+, in __init__',
            r"self\.n_local_groups = divide\(n_groups, self\.tp_size\)",
        ),
        actions=(
            "{divide_action}",
            "{divide_command}",
            "Plan the split before the start: dsv4ctl fit-length {model!q}{_fit_flags}",
        ),
        source=(
            "vllm==0.34.0 vllm/models/deepseek_v4/common/grouped_wo_a.py:26 (divide), "
            "vllm/distributed/utils.py:52-56 (the assertion), :143-147 (divide); "
            "vllm/models/deepseek_v4/attention.py:272, vllm/models/deepseek_v41/attention.py:69"
        ),
    ),
    Signature(
        id="extensible_kv_cache_disabled",
        severity="info",
        role="note",
        title="vLLM turned its measured (extensible) KV cache off: the KV cache is sized from estimates",
        meaning=(
            "{reason_text} vLLM 0.34 then sizes the KV cache as 0.33 did: 'Available KV cache memory' is the "
            "KV memory, gpu_memory_utilization defaults to 0.92, and auto-fit runs once, before CUDA-graph capture."
        ),
        patterns=(
            r"Disabling the extensible KV cache: (?P<reason>.*?)\. The KV cache will be sized from profiling estimates",
            r"Extensible KV cache off: without an IMEX channel",
        ),
        actions=(),
        source=(
            "vllm==0.34.0 vllm/v1/executor/abstract.py:175-179 (reason: v1/worker/gpu_worker.py:978-986, "
            "vllm/utils/vmm_driver.py:513-547); vllm/config/vllm.py:3256-3261 (no IMEX channel); the 0.92 default: "
            "vllm/config/cache.py:186, :495-501"
        ),
    ),
    Signature(
        id="gpu_util_caps_measured_kv",
        severity="warning",
        role="note",
        title="--gpu-memory-utilization {utilization} keeps {withheld} GiB out of the measured KV cache",
        meaning=(
            "vLLM 0.34 sizes the KV cache from the memory it measures after warmup and CUDA-graph capture, so its "
            "own use needs no headroom below 1.0 (the default in this mode). This launch's {utilization} caps the "
            "instance at {cap} GiB and keeps {withheld} GiB of free memory out of the KV cache (vLLM's own "
            "figures). Keep it only to leave room for memory vLLM does not measure: other processes on the GPU, "
            "weight-transfer buffers, a KV connector's buffers."
        ),
        patterns=(
            r"gpu_memory_utilization=(?P<utilization>[0-9.]+) caps this instance at (?P<cap>[0-9.]+) GiB, keeping "
            r"(?P<withheld>[0-9.]+) GiB of free device memory out of the KV cache",
        ),
        actions=(
            "Leave it unset (1.0 in this mode) unless something else shares the GPU: "
            "vllm serve {model!q}{_serve_no_util}",
        ),
        source=f"vllm==0.34.0 {_XKV}:654-676; the default 1.0: vllm/config/cache.py:495-501",
    ),
)

DERIVED: tuple[Signature, ...] = (
    Signature(
        id="measured_kv_uneven",
        severity="warning",
        role="note",
        title="One worker measured much less KV memory than the others: it set the KV cache{length_text}",
        meaning=(
            "vLLM 0.34 measures after warmup and CUDA-graph capture what fits on each worker and takes the least over "
            "ranks. {least_worker} measured {least_blocks:,} blocks ({least_gib} GiB; {least_free} GiB free after "
            "warmup), the others up to {most_blocks:,} ({most_gib} GiB; {most_free} GiB free): every worker holds "
            "{least_blocks:,}. The log does not say what holds the memory that worker lacks."
        ),
        patterns=(),
        actions=(
            "Check what else holds memory on that worker's GPU (another process, an old server): "
            "nvidia-smi --query-compute-apps=pid,used_memory --format=csv",
        ),
        source=(
            f"vllm==0.34.0 {_XKV}:693-706 (each worker's 'Memory after warmup'), "
            "vllm/v1/core/kv_cache_planning.py:1881-1882 (the least over ranks)"
        ),
    ),
)
