"""What the frames say was running when an error came: the part of vLLM its innermost vLLM frame belongs to, and the
setting that chooses that part or the state it keeps (a cache, the checkpoint's files). An error no rule explains is
still an error of that part: the answer names it and what to look at.

Each part is read from vLLM's source (vllm==0.33.0, cited beside it); a part is named only when a frame of the log is
in its files.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dsv4ctl import re_cache


@dataclass(frozen=True)
class Part:
    """A part of vLLM an error came from: what it is, and what to look at or change."""

    name: str  # plain words: "vLLM's torch.compile integration"
    sentence: str  # what that means for this error
    actions: tuple[str, ...]


# vllm==0.33.0 vllm/compilation/backends.py:1096 (VLLM_CACHE_ROOT/torch_compile_cache/<hash>), vllm/envs.py:714-719
# (VLLM_CACHE_ROOT, default ~/.cache/vllm), compilation/compiler_interface.py:669 (vLLM's own advice to remove it).
_COMPILATION = Part(
    "vLLM's torch.compile integration (vllm/compilation)",
    "It keeps the graphs it compiled in vLLM's compile cache, VLLM_CACHE_ROOT/torch_compile_cache (VLLM_CACHE_ROOT "
    "defaults to ~/.cache/vllm), and loads them on the next start: an artifact left there by an earlier start that "
    "failed or was killed mid-compile fails the next load.",
    ("Move the compile cache aside and start again (vLLM rebuilds it): mv ~/.cache/vllm/torch_compile_cache "
     "~/.cache/vllm/torch_compile_cache.old (under $VLLM_CACHE_ROOT where that is set)",
     "If it fails again with an empty cache, the compile itself fails; start without it (-O0 does the same): "
     "--enforce-eager"),
)


def _tokenizer(name: str) -> Part:
    # vllm==0.33.0 vllm/tokenizers/registry.py: --tokenizer-mode picks the tokenizer module (auto, hf, mistral, …)
    return Part(
        f"vLLM's '{name}' tokenizer (vllm/tokenizers/{name}.py)",
        f"vLLM loaded the tokenizer through its '{name}' tokenizer, which --tokenizer-mode selects (or 'auto' picks "
        "for this model); it reads that tokenizer's own files from the model directory.",
        (f"Check --tokenizer-mode: '{name}' is for models that ship its files; a model's own tokenizer files are read "
         "with --tokenizer-mode auto or hf",))


def _loader(name: str) -> Part:
    # vllm==0.33.0 vllm/model_executor/model_loader/__init__.py: --load-format picks the loader
    return Part(
        f"vLLM's {name} model loader (vllm/model_executor/model_loader/{name}_loader.py)",
        f"The weights were being loaded by the {name} loader, which --load-format selects.",
        (f"Check --load-format and the checkpoint's files: the {name} loader reads the formats it was written for",))


_LORA = Part(
    "vLLM's LoRA support (vllm/lora)",
    "A LoRA adapter was being loaded or applied: the adapter's files and how it was trained decide what vLLM can load.",
    ("Check the adapter's adapter_config.json (target_modules, modules_to_save, r) against what vLLM's LoRA loads",))

_PARTS: tuple[tuple[re.Pattern[str], Any], ...] = (
    (re_cache.compile(r"vllm/compilation/"), lambda m: _COMPILATION),
    (re_cache.compile(r"vllm/tokenizers/(?P<n>[a-z][a-z0-9_]*)\.py"), lambda m: _tokenizer(m.group("n"))
     if m.group("n") not in ("registry", "protocol", "detokenizer_utils", "__init__") else None),
    (re_cache.compile(r"vllm/model_executor/model_loader/(?P<n>[a-z][a-z0-9_]*)_loader\.py"),
     lambda m: _loader(m.group("n")) if m.group("n") not in ("base", "default") else None),
    (re_cache.compile(r"vllm/lora/"), lambda m: _LORA),
)


def part_of(files: list[str]) -> Part | None:
    """The part of vLLM the innermost vLLM frame is in (files innermost last), or None."""
    for file in reversed(files):
        if "vllm/" not in file:
            continue
        for rx, make in _PARTS:
            m = rx.search(file)
            if m is not None:
                return make(m)
        return None
    return None
