"""What the registry (dsv4ctl/fixes/__init__.py) and every fix module share: the fixes' names and target modules,
the statuses, a fix's check, the mark on our wrappers. A module of its own so that the fix modules, which the
registry loads lazily, import these without importing the registry back (no import circle, lazy ones included)."""

from __future__ import annotations

from dataclasses import dataclass

FIXES_ENV = "DSV4CTL_FIXES"
REPORT_ENV = "DSV4CTL_FIXES_REPORT"
LOGGER_NAME = "vllm.plugins.dsv4ctl"
LOG_PREFIX = "dsv4ctl fixes:"

STALE_MAX_MODEL_LEN = "stale-max-model-len"
DEEPGEMM_METADATA_CLAMP = "deepgemm-metadata-clamp"
FLASHMLA_EMPTY_PREFILL_CHUNK = "flashmla-empty-prefill-chunk"
FIX_NAMES: tuple[str, ...] = (STALE_MAX_MODEL_LEN, DEEPGEMM_METADATA_CLAMP, FLASHMLA_EMPTY_PREFILL_CHUNK)

# The module whose import makes a fix applicable (the one holding what it wraps).
TARGET_MODULES: dict[str, str] = {
    STALE_MAX_MODEL_LEN: "vllm.v1.worker.gpu.model_runner",
    DEEPGEMM_METADATA_CLAMP: "vllm.v1.attention.backends.mla.indexer",
    FLASHMLA_EMPTY_PREFILL_CHUNK: "vllm.models.deepseek_v4.nvidia.flashmla",
}

# Marks our wrappers (value: the fix's name), so that a wrapper is never wrapped again.
MARKER = "__dsv4ctl_fix__"

# Statuses a fix can end in, in one process.
APPLIED = "applied"
NOT_NEEDED = "not-needed"
SKIPPED = "skipped"
NOT_REQUESTED = "not-requested"
DEFERRED = "deferred"
NOT_APPLICABLE = "not-applicable"

# Fixes for one code path of one model: where this vLLM's code differs (or lacks the path), the fix
# reports `not-applicable` with the reason instead of a skipped fix's warning.
REPORTS_NOT_APPLICABLE = frozenset({FLASHMLA_EMPTY_PREFILL_CHUNK})

# Report events.
EVENT_REGISTER = "register"
EVENT_IMPORT = "import"


@dataclass(frozen=True)
class FixCheck:
    """A fix's need, computed from the installed code without changing anything.

    `applicable` is False when the fix's target is missing or has an unexpected shape.
    `needed` is True/False, or None when the code could not tell (see `reason`).
    `installed` says whether the wrapper is already in place in this process.
    """

    name: str
    applicable: bool
    needed: bool | None
    reason: str
    installed: bool = False

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "applicable": self.applicable, "needed": self.needed,
                "reason": self.reason, "installed": self.installed}


def is_wrapper(function: object, name: str) -> bool:
    """Is `function` the wrapper that fix `name` installed?"""
    return getattr(function, MARKER, None) == name


def unwrap(function: object, name: str) -> object:
    """The function under fix `name`'s wrapper(s); `function` itself when it is not wrapped."""
    while is_wrapper(function, name):
        function = function.__wrapped__  # type: ignore[attr-defined]
    return function


def mark_wrapper(wrapper: object, name: str) -> object:
    setattr(wrapper, MARKER, name)
    return wrapper
