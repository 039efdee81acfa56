"""Which environment variables `doctor` shows, secrets redacted by the one rule (dsv4ctl/redaction). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dsv4ctl.redaction import REDACTED, is_secret_name, looks_secret

RELEVANT_PREFIXES = ("VLLM_", "CUDA_", "NCCL_", "TORCH_", "DG_", "HF_", "DSV4CTL_", "PYTORCH_", "TRITON_", "OMP_")
RELEVANT_NAMES = ("CUDA_VISIBLE_DEVICES",)
__all__ = ["REDACTED", "EnvVar", "is_relevant", "is_secret_name", "looks_secret", "redact", "relevant_environment"]


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str
    redacted: bool

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "value": self.value, "redacted": self.redacted}


def is_relevant(name: str) -> bool:
    upper = name.upper()
    return upper in RELEVANT_NAMES or upper.startswith(RELEVANT_PREFIXES)


def redact(name: str, value: str) -> EnvVar:
    if is_secret_name(name) or looks_secret(value):
        return EnvVar(name, REDACTED, True)
    return EnvVar(name, value, False)


def relevant_environment(environ: Mapping[str, str]) -> tuple[EnvVar, ...]:
    """The relevant variables, sorted by name, secrets redacted."""
    return tuple(redact(name, environ[name]) for name in sorted(environ) if is_relevant(name))
