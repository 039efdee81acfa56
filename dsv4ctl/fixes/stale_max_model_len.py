"""Fix `stale-max-model-len`: keep every cached copy of max_model_len in step after auto-fit.

vLLM's V2 runner (`vllm.v1.worker.gpu.model_runner.GPUModelRunner`) is told the fitted length through
`update_max_model_len(max_model_len)`, which (0.27-0.33) updates only `self.max_model_len` and
`self.req_states.max_model_len` (0.34.0 also tells the speculator, `self.speculator.update_max_model_len`,
vllm==0.34.0 v1/worker/gpu/model_runner.py:381-385). Up to 0.30 `ModelState`
(`vllm/v1/worker/gpu/model_states/interface.py`) caches the length as a plain instance attribute that
CUDA-graph capture reads, so after auto-fit capture asks for the old, larger length (DeepSeek-V4 then fails
`_build_c128a_metadata`'s assert). From 0.31 `ModelState.max_model_len` is a read-only property over
`model_config` (the same in 0.34.0, interface.py:98-101) and must be left alone: the fix is needed on
0.27.1-0.30.0 and not needed on 0.31.0-0.34.0 (`check()` says so from the property).

The wrapper calls the original and then writes the fitted value into the model state and the
speculator, but only where they hold `max_model_len` as an instance attribute (never over a
property), and lowers the speculator's `draft_max_seq_len` to at most the fitted length.
"""

from __future__ import annotations

import functools
import inspect
from types import SimpleNamespace
from typing import Any

from dsv4ctl.fixes.base import (
    LOG_PREFIX,
    LOGGER_NAME,
    MARKER,  # noqa: F401 - the wrapper's mark, for callers inspecting it
    STALE_MAX_MODEL_LEN,
    TARGET_MODULES,
    FixCheck,
    is_wrapper,
    mark_wrapper,
    unwrap,
)

NAME = STALE_MAX_MODEL_LEN
RUNNER_MODULE = TARGET_MODULES[NAME]
RUNNER_CLASS = "GPUModelRunner"
METHOD = "update_max_model_len"
MODEL_STATE_MODULE = "vllm.v1.worker.gpu.model_states.interface"
MODEL_STATE_CLASS = "ModelState"


def _targets() -> tuple[type, Any, type] | str:
    """(GPUModelRunner, its update_max_model_len, ModelState) or the reason they are not usable."""
    import importlib

    try:
        runner_module = importlib.import_module(RUNNER_MODULE)
    except ImportError as exc:
        return f"{RUNNER_MODULE} cannot be imported ({exc}); this vLLM has no V2 model runner"
    runner_cls = getattr(runner_module, RUNNER_CLASS, None)
    if not isinstance(runner_cls, type):
        return f"{RUNNER_MODULE}.{RUNNER_CLASS} not found"
    method = inspect.getattr_static(runner_cls, METHOD, None)
    if not callable(method):
        return f"{RUNNER_CLASS}.{METHOD} not found"
    params = list(inspect.signature(method).parameters)
    if params[:2] != ["self", "max_model_len"]:
        return f"{RUNNER_CLASS}.{METHOD} has an unexpected signature ({', '.join(params)})"
    try:
        state_module = importlib.import_module(MODEL_STATE_MODULE)
    except ImportError as exc:
        return f"{MODEL_STATE_MODULE} cannot be imported ({exc})"
    state_cls = getattr(state_module, MODEL_STATE_CLASS, None)
    if not isinstance(state_cls, type):
        return f"{MODEL_STATE_MODULE}.{MODEL_STATE_CLASS} not found"
    return runner_cls, method, state_cls


def _propagates(original: Any) -> bool | None:
    """Does the unwrapped update_max_model_len already update model_state? Dry-run it on a stand-in
    object; fall back to reading its source. None when neither works."""
    old, new = 1_048_576, 980_224
    fake = SimpleNamespace(
        max_model_len=old,
        req_states=SimpleNamespace(max_model_len=old),
        model_state=SimpleNamespace(max_model_len=old),
        speculator=None,
    )
    try:
        original(fake, new)
        return fake.model_state.max_model_len == new
    except Exception:  # noqa: BLE001 - the method needs more than our stand-in; read its source
        try:
            return "model_state" in inspect.getsource(original)
        except (OSError, TypeError):
            return None


def check() -> FixCheck:
    targets = _targets()
    if isinstance(targets, str):
        return FixCheck(NAME, False, None, targets)
    runner_cls, method, state_cls = targets
    installed = is_wrapper(method, NAME)
    descriptor = inspect.getattr_static(state_cls, "max_model_len", None)
    if isinstance(descriptor, property):
        return FixCheck(NAME, True, False,
                        "ModelState.max_model_len is a read-only property that follows model_config", installed)
    if descriptor is not None and hasattr(type(descriptor), "__set__"):
        return FixCheck(NAME, False, None,
                        f"ModelState.max_model_len is an unexpected descriptor ({type(descriptor).__name__})",
                        installed)
    propagates = _propagates(unwrap(method, NAME))
    if propagates is True:
        return FixCheck(NAME, True, False,
                        f"{RUNNER_CLASS}.{METHOD} already updates model_state.max_model_len", installed)
    if propagates is None:
        return FixCheck(NAME, True, None,
                        "ModelState caches max_model_len; could not tell whether the update reaches it", installed)
    return FixCheck(NAME, True, True,
                    f"ModelState caches max_model_len as an instance attribute and {RUNNER_CLASS}.{METHOD} "
                    "does not update it", installed)


def _holds_plain_attribute(obj: Any, attr: str) -> bool:
    if obj is None:
        return False
    if isinstance(inspect.getattr_static(type(obj), attr, None), property):
        return False
    try:
        return attr in vars(obj)
    except TypeError:  # __slots__ objects have no __dict__
        return False


def propagate(runner: Any, max_model_len: int) -> list[str]:
    """Write the fitted length into every cached copy held as a plain attribute. Returns what changed."""
    changed = []
    for holder in ("model_state", "speculator"):
        obj = getattr(runner, holder, None)
        if _holds_plain_attribute(obj, "max_model_len"):
            obj.max_model_len = max_model_len
            changed.append(f"{holder}.max_model_len")
    speculator = getattr(runner, "speculator", None)
    if _holds_plain_attribute(speculator, "draft_max_seq_len"):
        current = speculator.draft_max_seq_len
        if isinstance(current, int) and current > max_model_len:
            speculator.draft_max_seq_len = max_model_len
            changed.append("speculator.draft_max_seq_len")
    return changed


def _make_wrapper(original: Any) -> Any:
    @functools.wraps(original)
    def update_max_model_len(self, max_model_len, *args, **kwargs):
        result = original(self, max_model_len, *args, **kwargs)
        try:
            propagate(self, max_model_len)
        except Exception as exc:  # noqa: BLE001 - never break the worker
            import logging

            logging.getLogger(LOGGER_NAME).warning(
                "%s %s could not propagate max_model_len=%s: %s: %s",
                LOG_PREFIX, NAME, max_model_len, type(exc).__name__, exc)
        return result

    return mark_wrapper(update_max_model_len, NAME)


def install() -> str:
    """Wrap GPUModelRunner.update_max_model_len (once). Returns what it did, for the log line."""
    targets = _targets()
    if isinstance(targets, str):
        raise RuntimeError(targets)
    runner_cls, method, _ = targets
    if is_wrapper(method, NAME):
        return f"{RUNNER_CLASS}.{METHOD} already wrapped"
    setattr(runner_cls, METHOD, _make_wrapper(method))
    return f"wrapped {RUNNER_CLASS}.{METHOD}"
