"""Example startup logs shipped with dsv4ctl (`dsv4ctl diagnose --example NAME`).

They are realistic logs written from vLLM's own format strings (see each file's header), small enough
to read in a terminal, so `diagnose` can be tried on a machine that has never run vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from dsv4ctl.errors import UsageError


@dataclass(frozen=True)
class Example:
    name: str
    filename: str
    description: str


EXAMPLES: tuple[Example, ...] = (
    Example(
        "stale-max-model-len",
        "stale-max-model-len.log",
        "vLLM 0.30.0, DeepSeek-V4-Flash TP2: auto-fit reduces max_model_len, then the C128A assertion fires",
    ),
    Example(
        "deepgemm-ima",
        "deepgemm-ima.log",
        "vLLM 0.27.1, DeepSeek-V4-Flash DP4+EP: illegal memory access at the start of FULL CUDA-graph capture",
    ),
    Example(
        "kv-cache-insufficient",
        "kv-cache-insufficient.log",
        "vLLM 0.32.0, DeepSeek-V4-Flash TP2: --max-model-len 1048576 does not fit the KV cache",
    ),
    Example(
        "healthy",
        "healthy.log",
        "vLLM 0.32.0, DeepSeek-V4-Flash TP2: auto-fit, capture and ready on port 8000",
    ),
)


def list_examples() -> tuple[Example, ...]:
    return EXAMPLES


def example_path(name: str) -> Path:
    """The file of example `name` (raises UsageError for an unknown name)."""
    for ex in EXAMPLES:
        if ex.name == name:
            return Path(str(resources.files("dsv4ctl").joinpath("examples", ex.filename)))
    names = ", ".join(e.name for e in EXAMPLES)
    raise UsageError(f"unknown example {name!r}", hint=f"available: {names} (dsv4ctl diagnose --list-examples)")
