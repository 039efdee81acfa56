#!/usr/bin/env python3
"""Record what vLLM's own KV planner answers for DeepSeek-V4.1-Flash (test data for fit-length's V4.1 mirror).

    .venv/bin/python scripts/planner_oracle_v41.py                 # 0.33.0 and 0.34.0
    .venv/bin/python scripts/planner_oracle_v41.py 0.34.0 --out tests/data/planner/deepseek-v41

The method is `planner_oracle.py`'s (one subprocess per release, the release's pure-Python sources first on
`sys.path`, the venv's torch), applied to V4.1's own classes:
- the release's `EngineArgs(...).create_engine_config()` reads dsv4ctl's built-in preset of
  deepseek-ai/DeepSeek-V4.1-Flash (the nested config.json: `text_config` is flattened by the release's own
  `transformers_utils/configs/deepseek_v41.py`);
- its `models/deepseek_v41/nvidia/flashmla.py` `DeepseekV4FlashMLAAttention` is built for every backbone layer
  on the `meta` device, with the model's own `candidate_block_buffer` (two-level top-k: the candidate source and
  the later ratio-1 indexers take it) - kv-source layers register their compressed cache, indexer K cache and
  compressor ring, the others read them;
- the V2 runner's `get_kv_cache_spec` (which applies `customize_attention_spec`), `get_global_kv_cache_groups`
  and `get_kv_cache_configs` plan them; bytes per block is the release's `_pool_bytes_per_block`.
- The GPU family is the one stub that matters: `Platform.get_device_capability` answers the point's
  capability (9.0 = H200, 10.0 = B200), so the kernels' block sizes (`sparse_mla.py`
  `get_supported_kernel_block_sizes`: 64 on SM90, 128 otherwise) and the KV record (`attention.py`
  `_use_v41_mxfp8_kv_record`: SM100 writes 528-byte MXFP8 rows, others 584) are that GPU's. The rest is
  `planner_oracle.py`'s stubs (no-op `torch.cuda.Event`, the o_proj fp8 recipe, V2 runner set after the config).

Grid (its own, V4.1 only): (SM90, block 64 = vLLM's pick), (SM90, --block-size 128, the lcm trap),
(SM100, block 128 = vLLM's pick) x 8 memory sizes x max_num_batched_tokens 2048/8192, no speculation.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from planner_oracle import BATCHED_TOKENS_GRID, DEFAULT_SRC, GiB, MiB, REPO, builtin_configs  # noqa: E402

MODEL = "deepseek-ai/DeepSeek-V4.1-Flash"
DEFAULT_OUT = REPO / "tests" / "data" / "planner" / "deepseek-v41"
RELEASES = ("0.33.0", "0.34.0")
MEMORY_GRID = (5 * MiB, 1 * GiB, 2 * GiB, 4 * GiB, int(7.5 * GiB), 16 * GiB, 48 * GiB, 66 * GiB)
# (compute capability major, block size): vLLM's pick on each GPU, and the H200 trap.
ARCH_GRID = ((9, 64), (9, 128), (10, 128))
KV_CACHE_DTYPE = "fp8"


def _patch_capability(major: int) -> None:
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    type(current_platform).get_device_capability = classmethod(lambda cls, device_id=0: DeviceCapability(major, 0))


def _build_specs(vc, num_layers: int, major: int):
    """The release's own V4.1 layers on `meta`, then its runner's specs (customized per backend)."""
    import torch

    import vllm.models.deepseek_v41.nvidia.flashmla as flashmla
    from vllm.config import set_current_vllm_config
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        record_kv_cache_layout,
        resolve_kv_cache_layout,
    )
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    _patch_capability(major)
    flashmla.compute_fp8_einsum_recipe = lambda *a, **k: (None, None)
    flashmla.register_dsv41_o_proj_warmup = lambda *a, **k: None
    vc.compilation_config.static_forward_context.clear()
    config = vc.model_config.hf_config
    with set_current_vllm_config(vc), torch.device("meta"):
        candidates = torch.empty(vc.scheduler_config.max_num_batched_tokens, config.candidate_topk_blocks, dtype=torch.int32)
        for layer_id in range(num_layers):
            flashmla.DeepseekV4FlashMLAAttention(
                vc, prefix=f"model.layers.{layer_id}.attn", topk_indices_buffer=None, aux_stream_list=None,
                candidate_block_buffer=candidates,
            )
        specs = get_kv_cache_spec(vc)
        # The engine core resolves the KV layout once before planning (block-outermost for V4.1's indexer).
        names = [layout.name for layout in get_supported_kv_cache_layouts(get_current_attn_backends(vc))]
        layout = resolve_kv_cache_layout(vc, [names], list(specs.values()))
        record_kv_cache_layout(vc.cache_config, layout.name)
    return specs


def _describe(specs) -> list[dict]:
    out = []
    for name, spec in specs.items():
        alignment = spec.get_block_stride_alignment() if hasattr(spec, "get_block_stride_alignment") else 1
        out.append({"name": name, "class": type(spec).__name__, "block_size": spec.block_size,
                    "page_size_bytes": spec.page_size_bytes, "block_stride_alignment": alignment,
                    "sliding_window": getattr(spec, "sliding_window", None)})
    return out


def worker(release_dir: Path, version: str) -> dict:
    """Kept whole: one release's set-up (imports with fallbacks, the distributed group) then the grid, in the
    order vLLM's engine runs them."""
    sys.path.insert(0, str(release_dir))
    import importlib.metadata

    real_version = importlib.metadata.version
    importlib.metadata.version = lambda name: f"{version}+cpu" if name == "vllm" else real_version(name)
    import torch

    import vllm

    if not Path(vllm.__file__).resolve().is_relative_to(release_dir.resolve()):
        raise SystemExit(f"imported {vllm.__file__}, not vLLM {version} from {release_dir}")
    from vllm.config import set_current_vllm_config
    from vllm.distributed.parallel_state import (
        destroy_distributed_environment,
        destroy_model_parallel,
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.core.kv_cache_planning import _pool_bytes_per_block, get_global_kv_cache_groups, get_kv_cache_configs

    class _NoCudaEvent:
        def __init__(self, *args, **kwargs):
            pass

    torch.cuda.Event = _NoCudaEvent
    # Imported before any config is built, so that the modules binding `HAS_TRITON` at import read the real value
    # (the 0.34 config check below reports Triton present for the check alone).
    import vllm.models.deepseek_v41.nvidia.flashmla  # noqa: F401

    # Without its quantization_config: the CPU build has no kernel for 32x32 block-scaled fp8 linears, and no KV
    # size reads it (the indexer's K cache dtype is attention_config's, `dsa_indexer_uses_fp4`).
    config = {k: v for k, v in builtin_configs()[MODEL].items() if k != "quantization_config"}
    num_layers = config["text_config"]["num_hidden_layers"]
    tmp = Path(tempfile.mkdtemp(prefix="dsv41-oracle-"))
    (tmp / "config.json").write_text(json.dumps(config))
    points, layouts = [], {}
    for major, block_size in ARCH_GRID:
        os.environ.pop("VLLM_USE_V2_MODEL_RUNNER", None)
        # 0.34's CPU platform refuses an x86 host without triton-cpu while checking the config
        # (platforms/cpu.py:242-243); the answer is read with Triton reported present for that check only.
        import vllm.triton_utils as triton_utils

        has_triton, triton_utils.HAS_TRITON = triton_utils.HAS_TRITON, True
        try:
            vc = EngineArgs(
                model=str(tmp), max_model_len=-1, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
                kv_cache_dtype=KV_CACHE_DTYPE, block_size=block_size, trust_remote_code=False,
            ).create_engine_config()
        finally:
            triton_utils.HAS_TRITON = has_triton
        os.environ["VLLM_USE_V2_MODEL_RUNNER"] = "1"
        vc.cache_config.block_size = block_size
        vc.cache_config.cache_dtype = KV_CACHE_DTYPE
        model_max = vc.model_config.max_model_len
        with set_current_vllm_config(vc):
            if not model_parallel_is_initialized():
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    port = s.getsockname()[1]
                init_distributed_environment(
                    world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}", local_rank=0, backend="gloo"
                )
                initialize_model_parallel(1, 1)
        specs = _build_specs(vc, num_layers, major)
        layouts[f"sm{major}0-b{block_size}"] = _describe(specs)
        for memory in MEMORY_GRID:
            for mnbt in BATCHED_TOKENS_GRID:
                vc.scheduler_config.max_num_batched_tokens = mnbt
                vc.scheduler_config.async_scheduling = True
                vc.model_config.original_max_model_len = -1
                vc.model_config.max_model_len = model_max
                point = {"model": MODEL, "compute_capability_major": major, "block_size": block_size,
                         "kv_cache_memory_bytes": memory, "max_num_batched_tokens": mnbt, "async_scheduling": True,
                         "kv_cache_dtype": KV_CACHE_DTYPE}
                try:
                    with set_current_vllm_config(vc):
                        groups = get_global_kv_cache_groups(vc, [dict(specs)])
                        kv_configs = get_kv_cache_configs(vc, [dict(specs)], [memory], groups)
                except ValueError as exc:
                    point.update(autofit_max_model_len=0, num_blocks=0, bytes_per_block=0, num_groups=0, error=str(exc))
                else:
                    cfg = kv_configs[0]
                    point.update(
                        autofit_max_model_len=vc.model_config.max_model_len,
                        num_blocks=cfg.num_blocks,
                        bytes_per_block=_pool_bytes_per_block(vc, cfg.kv_cache_groups),
                        num_groups=len(cfg.kv_cache_groups),
                        error=None,
                    )
                points.append(point)
        vc.model_config.max_model_len = model_max
    if model_parallel_is_initialized():
        destroy_model_parallel()
        destroy_distributed_environment()
    return {
        "vllm_version": version,
        "produced_by": "scripts/planner_oracle_v41.py: vLLM's own DeepSeek-V4.1 layers, get_kv_cache_spec, "
                       "get_global_kv_cache_groups and get_kv_cache_configs",
        "vllm_source": str(release_dir / "vllm"),
        "layouts": layouts,
        "points": points,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", default=list(RELEASES))
    parser.add_argument("--src", type=Path, default=DEFAULT_SRC)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--worker", metavar="VERSION", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.result.write_text(json.dumps(worker(args.src / f"vllm-{args.worker}", args.worker)))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for version in args.versions:
        started = time.monotonic()
        cache_root = tempfile.mkdtemp(prefix=f"vllm-{version}-cache-")
        result_file = Path(cache_root) / "result.json"
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", version, "--src", str(args.src), "--result", str(result_file)],
            capture_output=True, text=True,
            env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", "VLLM_TARGET_DEVICE": "cpu", "VLLM_CACHE_ROOT": cache_root,
                 "PYTHONPATH": os.pathsep.join(p for p in (str(args.src / f"vllm-{version}"), os.environ.get("PYTHONPATH")) if p)},
        )
        if proc.returncode != 0:
            failed += 1
            print(f"{version}: FAILED\n{(proc.stdout + proc.stderr)[-6000:]}", file=sys.stderr)
            continue
        data = json.loads(result_file.read_text())
        path = args.out / f"{version}.json"
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{version}: {len(data['points'])} points -> {path} ({time.monotonic() - started:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
