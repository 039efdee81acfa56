"""Fix `flashmla-empty-prefill-chunk`: never hand FlashMLA's sparse prefill an empty query range.

DeepSeek-V4's CUDA attention (`vllm/models/deepseek_v4/nvidia/flashmla.py`,
`DeepseekV4FlashMLAAttention._forward_prefill`) loops over the chunk plan of
`DeepseekSparseSWAMetadata.get_prefill_chunk_plan` (`vllm/v1/attention/backends/mla/sparse_swa.py`)
and calls `flash_mla_sparse_fwd(q=q[query_start:query_end], ...)` for every chunk. The plan assumes
every request of the prefill region has at least one query token; the scheduler does not guarantee it
(a KV-transfer async load schedules a request with zero query tokens). A chunk made only of such
requests gives the kernel a query of zero rows, and a TMA descriptor with a zero dimension is refused
by the driver (`CUDA_ERROR_INVALID_VALUE`, measured on an H200): FlashMLA's SM90 sparse prefill then
fails `Assertion \\`res == CUresult::CUDA_SUCCESS\\`` in `phase1.cuh`. The SM120 path
(`flashinfer_sparse.py`) guards the same call with `if num_prefill_tokens > 0:`.

The wrapper keeps empty query ranges away from the kernel; it never clamps a length (a clamped range
would describe a query row the request does not have):
- every request of the batch has query tokens: the original runs untouched (the common case);
- none has: nothing is computed (there is no query row to write), as the SM120 guard does;
- some have none: the original runs with a copy of the SWA metadata whose `get_prefill_chunk_plan`
  splits each chunk around its zero-query requests, keeping the chunk's workspace sizes (upper bounds
  for every part). Each remaining chunk has at least one query token; every query row is still
  computed exactly once.

DeepSeek-V4.1's FlashMLA attention (`vllm/models/deepseek_v41/nvidia/flashmla.py`, a class of the same name; its
`_forward_prefill` at line 248 in 0.32.0, 269 in 0.33.0, 281 in 0.34.0) walks the same chunk plan (with
`has_compressed=`) and calls `flash_mla_sparse_fwd(q=q[query_start:query_end, ...])` unguarded in all three: the
same bug, the same wrapper. Its module imports DeepSeek-V4's first (`vllm.models.deepseek_v4.nvidia.ops.o_proj`), so
the V4 class is wrapped when the registry's target lands and the V4.1 class when its own module is imported
(`install_v41`, a watch of its own), each only where its `_forward_prefill` has no guard.

Need: `_forward_prefill` has no guard before the kernel call (an `if` on the query range or on
`num_prefill_tokens` that skips) and the real `get_prefill_chunk_plan`, run on a one-request batch
with zero query tokens, still plans a chunk for it; and this vLLM build ships FlashMLA's kernels
(`vllm/_flashmla_C`). vLLM 0.25.0 to 0.34.0 all have the unguarded path (vllm==0.34.0
models/deepseek_v4/nvidia/flashmla.py:262 `_forward_prefill`, AST-identical to 0.33.0's :266, kernel call
:386; sparse_swa.py:266 `get_prefill_chunk_plan`, AST-identical to 0.33.0's :260; `_flashmla_C.abi3.so`
shipped): needed on every release with the path.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib.util
import inspect
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from dsv4ctl.fixes.base import FLASHMLA_EMPTY_PREFILL_CHUNK, TARGET_MODULES, FixCheck, is_wrapper, mark_wrapper, unwrap

NAME = FLASHMLA_EMPTY_PREFILL_CHUNK
ATTENTION_MODULE = TARGET_MODULES[NAME]
ATTENTION_CLASS = "DeepseekV4FlashMLAAttention"
METHOD = "_forward_prefill"
KERNEL = "flash_mla_sparse_fwd"
PLAN_MODULE = "vllm.v1.attention.backends.mla.sparse_swa"
METADATA_CLASS = "DeepseekSparseSWAMetadata"
PLAN_METHOD = "get_prefill_chunk_plan"
METADATA_PARAM = "swa_metadata"
ATTENTION_FILE = ("models", "deepseek_v4", "nvidia", "flashmla.py")
EXTENSION_PREFIX = "_flashmla_C"

# The per-step answer for one metadata object, kept on it: ~60 layers share one metadata per step.
_CACHE_ATTR = "__dsv4ctl_nonempty_prefills__"
_ALL_NONEMPTY = "all"
_NONE_NONEMPTY = "none"


def _vllm_dir() -> Path | None:
    """vLLM's package directory, found without importing any vLLM submodule."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def applicable_without_target() -> str | None:
    """Why the fix cannot apply to this vLLM, read from its files alone; None when it can."""
    root = _vllm_dir()
    if root is None:
        return "vLLM is not installed"
    if not root.joinpath(*ATTENTION_FILE).is_file():
        return f"this vLLM has no DeepSeek-V4 FlashMLA attention ({'/'.join(('vllm',) + ATTENTION_FILE)})"
    return None


def _has_flashmla_kernels() -> tuple[bool | None, str]:
    root = _vllm_dir()
    if root is None:
        return None, "vLLM is not installed"
    if any(root.glob(f"{EXTENSION_PREFIX}.*")):
        return True, f"this vLLM build ships FlashMLA's kernels (vllm/{EXTENSION_PREFIX})"
    return False, (f"this vLLM build ships no FlashMLA kernels (no vllm/{EXTENSION_PREFIX}): "
                   "the sparse prefill kernel never runs here")


def need_without_target() -> tuple[bool | None, str]:
    """Not needed, from the files alone, where the build has no FlashMLA kernels (the CPU build)."""
    present, reason = _has_flashmla_kernels()
    return (False, reason) if present is False else (None, reason)


def _targets() -> tuple[type, Any, Any, int] | str:
    """(the attention class, its _forward_prefill, the metadata class' plan method, the position of
    `swa_metadata` among the arguments after self) or why the code differs."""
    import importlib

    try:
        module = importlib.import_module(ATTENTION_MODULE)
    except ImportError as exc:
        return f"{ATTENTION_MODULE} cannot be imported ({exc})"
    cls = getattr(module, ATTENTION_CLASS, None)
    if not isinstance(cls, type):
        return f"{ATTENTION_MODULE}.{ATTENTION_CLASS} not found"
    method = inspect.getattr_static(cls, METHOD, None)
    if not callable(method):
        return f"{ATTENTION_CLASS}.{METHOD} not found"
    params = list(inspect.signature(unwrap(method, NAME)).parameters)
    if params[:1] != ["self"] or METADATA_PARAM not in params or "q" not in params:
        return f"{ATTENTION_CLASS}.{METHOD} has an unexpected signature ({', '.join(params)})"
    if not callable(getattr(module, KERNEL, None)):
        return f"{ATTENTION_MODULE} does not import {KERNEL}"
    try:
        plan_module = importlib.import_module(PLAN_MODULE)
    except ImportError as exc:
        return f"{PLAN_MODULE} cannot be imported ({exc})"
    metadata_cls = getattr(plan_module, METADATA_CLASS, None)
    plan = inspect.getattr_static(metadata_cls, PLAN_METHOD, None) if isinstance(metadata_cls, type) else None
    if not callable(plan):
        return f"{METADATA_CLASS}.{PLAN_METHOD} not found"
    return cls, method, plan, params.index(METADATA_PARAM) - 1


def _guards_empty_range(function: Any) -> bool | None:
    """Does `function` skip an empty query range before the kernel? An `if` on the query range or on
    the prefill token count whose body continues or returns. None when its source cannot be read."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    except (OSError, TypeError, SyntaxError):
        return None
    return guards_empty_range_tree(tree)


def guards_empty_range_tree(tree: ast.AST) -> bool:
    """`_guards_empty_range` on a parsed function (scripts/release_delta.py reads a release's file with it)."""
    watched = {"query_start", "query_end", "num_prefill_tokens"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(node.test) if isinstance(n, ast.Attribute)}
        if names & watched and any(isinstance(s, (ast.Continue, ast.Return)) for s in node.body):
            return True
    return False


def _plans_empty_chunk(plan: Any) -> bool | None:
    """Run the real plan method on a one-request batch with zero query tokens: does it plan a chunk
    that holds only that request? None when the dry run fails."""
    import torch

    meta = SimpleNamespace(
        num_prefills=1, prefill_seq_lens_cpu=torch.tensor([64], dtype=torch.int32),
        prefill_query_lens_cpu=torch.tensor([0], dtype=torch.int32),
        prefill_max_model_len=1024, prefill_window_size=128, prefill_max_num_batched_tokens=256,
    )
    try:
        chunks = plan(meta, compress_ratio=4, prefill_chunk_size=4)
        return any(tuple(chunk[:2]) == (0, 1) for chunk in chunks)
    except Exception:  # noqa: BLE001 - another shape of the plan: decide from the call site alone
        return None


def check() -> FixCheck:
    targets = _targets()
    if isinstance(targets, str):
        return FixCheck(NAME, False, None, targets)
    _, method, plan, _ = targets
    installed = is_wrapper(method, NAME)
    guarded = _guards_empty_range(unwrap(method, NAME))
    if guarded:
        return FixCheck(NAME, True, False, f"{ATTENTION_CLASS}.{METHOD} already skips empty query ranges",
                        installed)
    empty = _plans_empty_chunk(plan)
    if empty is False:
        return FixCheck(NAME, True, False, f"{METADATA_CLASS}.{PLAN_METHOD} plans no chunk for a zero-query "
                        "request", installed)
    kernels, kernels_reason = _has_flashmla_kernels()
    if kernels is False:
        return FixCheck(NAME, True, False, kernels_reason, installed)
    if guarded is None or empty is None:
        return FixCheck(NAME, True, None, f"could not read whether {ATTENTION_CLASS}.{METHOD} skips empty "
                        "query ranges", installed)
    return FixCheck(NAME, True, True,
                    f"{ATTENTION_CLASS}.{METHOD} calls {KERNEL} for every chunk of {PLAN_METHOD}, which plans "
                    "a chunk for a request with zero query tokens", installed)


def nonempty_prefills(meta: Any) -> str | tuple[bool, ...] | None:
    """For the prefill requests of this batch: `all` have query tokens, `none` has, or a tuple saying
    which have. From `query_start_loc_cpu`, the offsets `_forward_prefill` slices q with (CPU: no
    device sync). None when the metadata has no such offsets (leave the original alone)."""
    num_decodes, num_prefills = int(meta.num_decodes), int(meta.num_prefills)
    offsets = meta.query_start_loc_cpu
    if num_prefills <= 0 or offsets is None:
        return None
    bounds = offsets[num_decodes:num_decodes + num_prefills + 1].tolist()
    if len(bounds) != num_prefills + 1:
        return None
    flags = tuple(end > start for start, end in zip(bounds, bounds[1:]))
    if all(flags):
        return _ALL_NONEMPTY
    if not any(flags):
        return _NONE_NONEMPTY
    return flags


def split_plan(chunks: list[tuple[int, ...]], nonempty: tuple[bool, ...]) -> list[tuple[int, ...]]:
    """Each chunk `(start, end, *sizes)` split around its zero-query requests; the sizes are kept (the
    chunk's maxima bound every part). Pure."""
    out: list[tuple[int, ...]] = []
    for start, end, *sizes in chunks:
        run = None
        for index in range(start, end):
            if nonempty[index] and run is None:
                run = index
            elif not nonempty[index] and run is not None:
                out.append((run, index, *sizes))
                run = None
        if run is not None:
            out.append((run, end, *sizes))
    return out


def _view_without_empty(meta: Any, nonempty: tuple[bool, ...]) -> Any:
    """A shallow copy of the metadata whose chunk plan skips the zero-query requests."""
    plan = meta.get_prefill_chunk_plan

    def get_prefill_chunk_plan(*args: Any, **kwargs: Any) -> list[tuple[int, ...]]:
        return split_plan(plan(*args, **kwargs), nonempty)

    view = copy.copy(meta)
    view.__dict__.pop(_CACHE_ATTR, None)
    view.get_prefill_chunk_plan = get_prefill_chunk_plan
    return view


def _cache_key(meta: Any) -> tuple[Any, ...]:
    """What the decision depends on: the counts and the offsets tensor (its identity and its in-place version),
    so a metadata object vLLM refilled in place is decided again."""
    offsets = meta.query_start_loc_cpu
    return (meta.num_decodes, meta.num_prefills, id(offsets), getattr(offsets, "_version", None))


def _decision(meta: Any) -> Any:
    """`all`, `none` or the metadata view to run with; computed once per metadata object and step (the ~60
    layers of a step share one metadata object)."""
    key = _cache_key(meta)
    cached = getattr(meta, "__dict__", {}).get(_CACHE_ATTR)
    if cached is not None and cached[0] == key:
        return cached[1]
    flags = nonempty_prefills(meta)
    if flags is None:
        decision: Any = _ALL_NONEMPTY
    elif isinstance(flags, str):
        decision = flags
    else:
        decision = _view_without_empty(meta, flags)
    try:
        meta.__dict__[_CACHE_ATTR] = (key, decision)
    except (AttributeError, TypeError):  # no __dict__: decide again next time
        pass
    return decision


def _make_wrapper(original: Any, metadata_index: int) -> Any:
    @functools.wraps(original)
    def _forward_prefill(self, *args, **kwargs):
        in_kwargs = METADATA_PARAM in kwargs
        try:
            meta = kwargs[METADATA_PARAM] if in_kwargs else args[metadata_index]
            decision = _decision(meta)
        except Exception:  # noqa: BLE001 - never break a step: run vLLM's own code
            return original(self, *args, **kwargs)
        if decision == _ALL_NONEMPTY:
            return original(self, *args, **kwargs)
        if decision == _NONE_NONEMPTY:
            return None  # no query token in the prefill region: no row to compute (the SM120 guard)
        if in_kwargs:
            kwargs[METADATA_PARAM] = decision
        else:
            args = args[:metadata_index] + (decision,) + args[metadata_index + 1:]
        return original(self, *args, **kwargs)

    return mark_wrapper(_forward_prefill, NAME)


def install() -> str:
    targets = _targets()
    if isinstance(targets, str):
        raise RuntimeError(targets)
    cls, method, _, metadata_index = targets
    v41 = _watch_v41()
    if is_wrapper(method, NAME):
        return f"{ATTENTION_CLASS}.{METHOD} already wrapped{v41}"
    setattr(cls, METHOD, _make_wrapper(method, metadata_index))
    return f"wrapped {ATTENTION_CLASS}.{METHOD} (empty query ranges skipped before {KERNEL}){v41}"


V41_MODULE = "vllm.models.deepseek_v41.nvidia.flashmla"
V41_FILE = ("models", "deepseek_v41", "nvidia", "flashmla.py")


def install_v41(module: Any = None) -> str:
    """Wrap DeepSeek-V4.1's `_forward_prefill` where it has the same unguarded call; the reason otherwise."""
    import importlib

    module = module if module is not None else importlib.import_module(V41_MODULE)
    cls = getattr(module, ATTENTION_CLASS, None)
    method = inspect.getattr_static(cls, METHOD, None) if isinstance(cls, type) else None
    if not callable(method):
        return f"{V41_MODULE}.{ATTENTION_CLASS}.{METHOD} not found"
    if is_wrapper(method, NAME):
        return "DeepSeek-V4.1's already wrapped"
    params = list(inspect.signature(unwrap(method, NAME)).parameters)
    if params[:1] != ["self"] or METADATA_PARAM not in params or not callable(getattr(module, KERNEL, None)):
        return f"DeepSeek-V4.1's {METHOD} has an unexpected shape ({', '.join(params)})"
    if _guards_empty_range(unwrap(method, NAME)) is not False:
        return f"DeepSeek-V4.1's {METHOD} already skips empty query ranges (or could not be read)"
    setattr(cls, METHOD, _make_wrapper(method, params.index(METADATA_PARAM) - 1))
    return f"wrapped DeepSeek-V4.1's {ATTENTION_CLASS}.{METHOD}"


def _watch_v41() -> str:
    """DeepSeek-V4.1's class wrapped now if its module is loaded, else when it is; what was done, as a suffix."""
    import logging
    import sys

    root = _vllm_dir()
    if root is None or not root.joinpath(*V41_FILE).is_file():
        return ""
    if V41_MODULE in sys.modules and hasattr(sys.modules[V41_MODULE], ATTENTION_CLASS):
        return f"; {install_v41(sys.modules[V41_MODULE])}"
    from dsv4ctl.fixes import post_import
    from dsv4ctl.fixes.base import LOG_PREFIX, LOGGER_NAME

    def landed(module: Any) -> None:
        log = logging.getLogger(LOGGER_NAME)
        try:
            log.info("%s %s: %s", LOG_PREFIX, NAME, install_v41(module))
        except Exception as exc:  # noqa: BLE001 - the import itself must succeed
            log.warning("%s %s: DeepSeek-V4.1's not wrapped: %s: %s", LOG_PREFIX, NAME, type(exc).__name__, exc)

    post_import.finder().watch(V41_MODULE, f"{LOGGER_NAME}:{NAME}:v41", landed)
    return f"; DeepSeek-V4.1's when {V41_MODULE} is imported"
