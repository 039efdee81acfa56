"""What the family answers share: this launch's command with one change, the vLLM flag that sets a named value, the
platform a log shows and the attention backends that belong to it."""

from __future__ import annotations

import shlex
from typing import Any

from dsv4ctl import re_cache
from dsv4ctl.logs import deployment
from dsv4ctl.logs.timeline import StartupTimeline


def flag_for(name: str | None, release: str | None = None) -> str | None:
    """The `vllm serve` flag that sets the engine argument `name` ("max_lora_rank" -> "--max-lora-rank") in
    `release` (catalogue/vllm_flags, each release's own flags), or None: a name no flag sets."""
    if not name:
        return None
    from dsv4ctl.catalogue import vllm_flags  # a table of every release's flags: loaded by the answers that ask

    return vllm_flags.flag_for_field(name.strip().strip("`'\"").lstrip("-").replace("-", "_"), release)


def serve_with(tl: StartupTimeline, changes: dict[str, Any], drop: tuple[str, ...] = ()) -> str | None:
    """This launch's own `vllm serve` command with `changes` (vLLM destination names) applied and `drop` removed;
    None when the log does not name the model (a command with a placeholder would not run)."""
    if not tl.model:
        return None
    tokens: list[str] = []
    for name, value in deployment.launch_args(tl).items():
        if name in ("model_tag", "model", "dispatch_function", "subparser") or name in changes or name in drop:
            continue
        tokens += deployment.flag_tokens(name, value)
    for name, value in changes.items():
        tokens += deployment.flag_tokens(name, value)
    return f"vllm serve {shlex.quote(tl.model)}" + "".join(" " + shlex.quote(t) for t in tokens)


def with_command(key: str, command: str | None) -> dict[str, str]:
    """`{key}` and `{key}_sep` for a template "…{key_sep}{key}": ": <command>" when there is a command, else nothing."""
    return {key: command or "", f"{key}_sep": ": " if command else ""}


def arg(tl: StartupTimeline, name: str) -> Any:
    return deployment.launch_args(tl).get(name)


# The platform a log shows: vLLM's platform module in its frames (vllm/platforms/<name>.py), else the platform's own
# words (HIP's error names and the ROCm paths torch's HIP build prints; Intel's, Ascend's and NVIDIA's names).
_PLATFORM_FILES = (("CUDA", "platforms/cuda.py"), ("ROCM", "platforms/rocm.py"), ("XPU", "platforms/xpu.py"),
                   ("CPU", "platforms/cpu.py"))
_PLATFORM_WORDS = (
    ("ROCM", re_cache.compile(r"\bROCm\b|\bHIP\b|hipError\w*|/opt/rocm|torch\.version\.hip|\bgfx9[0-9a-f]{2}\b|"
                              r"\bMI[23][0-9]{2}\b|amdgpu")),
    ("XPU", re_cache.compile(r"\bXPU\b|\bxpu:|Intel\(R\) Data Center GPU|\bIPEX\b")),
    ("NPU", re_cache.compile(r"\bAscend\b|\bNPU\b|torch_npu|vllm_ascend")),
    ("CUDA", re_cache.compile(r"\bCUDA\b|\bcuda:|NVIDIA|\bH100\b|\bH200\b|\bB200\b|\bGB10\b|\bGB200\b|\bA100\b|RTX|"
                              r"\bsm_?[0-9]{2,3}\b")),
)
PLATFORM_NAMES = {"CUDA": "CUDA", "ROCM": "ROCm", "XPU": "XPU", "CPU": "CPU", "NPU": "Ascend NPU"}


def platform_of(text: str, *, words: bool = True) -> str | None:
    """The platform ('CUDA', 'ROCM', 'XPU', 'CPU', 'NPU') a log's text shows, None when it shows none; with
    words=False only vLLM's platform module in the frames counts."""
    for name, file in _PLATFORM_FILES:
        if file in text:
            return name
    return next((name for name, rx in _PLATFORM_WORDS if rx.search(text)), None) if words else None


def platform_file(platform: str) -> str | None:
    """vLLM's module of that platform ('platforms/rocm.py'), None for a platform vLLM keeps out of its tree."""
    return dict(_PLATFORM_FILES).get(platform)


# The platform an attention backend's name carries (vllm==0.33.0 vllm/v1/attention/backends/registry.py
# AttentionBackendEnum: ROCM_*, ROCM_AITER_*, XPU_*, CPU_*, CPU_AMX …; plugins' NPU_*/ASCEND_*, TPU's PALLAS).
_BACKEND_PREFIX = re_cache.compile(r"^(ROCM|AITER|XPU|IPEX|CPU|AMX|TPU|HPU|NPU|ASCEND|PALLAS)_")
_PREFIXES_OF = {"ROCM": ("ROCM", "AITER"), "XPU": ("XPU", "IPEX"), "NPU": ("NPU", "ASCEND"), "CPU": ("CPU", "AMX")}


def backend_on(name: str, platform: str | None) -> bool:
    """Whether an attention backend may be offered on `platform`: one whose name carries another platform's prefix never
    is, nor one carrying any platform's prefix when the log shows no platform."""
    m = _BACKEND_PREFIX.match(name.upper())
    if m is None:
        return True
    return platform is not None and m.group(1) in _PREFIXES_OF.get(platform, ())
