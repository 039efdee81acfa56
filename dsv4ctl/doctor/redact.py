"""Which environment variables `doctor` shows, and redaction of secrets. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

REDACTED = "***redacted***"
RELEVANT_PREFIXES = ("VLLM_", "CUDA_", "NCCL_", "TORCH_", "DG_", "HF_", "DSV4CTL_", "PYTORCH_", "TRITON_", "OMP_")
RELEVANT_NAMES = ("CUDA_VISIBLE_DEVICES",)
SECRET_NAME_PARTS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "SIGNATURE")
# Hugging Face access tokens: `hf_` followed by a long alphanumeric run.
_HF_TOKEN = re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{16,}")
# Any user information inside a URL: `user:password@`, `:password@` or a bare `token@`.
_URL_CREDENTIALS = re.compile(r"://[^/\s@]+@")
# A query parameter (`?name=value`, `&name=value`); its name is judged like a variable's name.
_QUERY_PARAM = re.compile(r"[?&;]([^=&;#\s]+)=[^&;#\s]")


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


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(part in upper for part in SECRET_NAME_PARTS)


def looks_secret(value: str) -> bool:
    """A Hugging Face token, user information in a URL, or a URL query parameter with a secret name
    (`?token=`, `&api_key=`, `X-Amz-Signature=`...)."""
    if _HF_TOKEN.search(value) or _URL_CREDENTIALS.search(value):
        return True
    return any(is_secret_name(match.group(1)) for match in _QUERY_PARAM.finditer(value))


def redact(name: str, value: str) -> EnvVar:
    if is_secret_name(name) or looks_secret(value):
        return EnvVar(name, REDACTED, True)
    return EnvVar(name, value, False)


def relevant_environment(environ: Mapping[str, str]) -> tuple[EnvVar, ...]:
    """The relevant variables, sorted by name, secrets redacted."""
    return tuple(redact(name, environ[name]) for name in sorted(environ) if is_relevant(name))
