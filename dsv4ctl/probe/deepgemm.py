"""`probe deepgemm`: is this node's DeepGEMM affected by the SM90 scheduler-metadata OOB read?

Three ways, strongest first:
- `kernel`: compile a tiny launcher (`deepgemm_sm90_metadata.cu`, shipped next to this module) for
  `deep_gemm::sched::sm90_paged_mqa_logits_metadata` against the DeepGEMM headers, with nvcc, and run
  the upstream report's cases, one process per case (an illegal access poisons the CUDA context).
  Needs nvcc and an SM90 GPU.
- `python`: the upstream report's repro through the installed `vllm.utils.deep_gemm`, one process per
  case. Needs vLLM, torch and a CUDA GPU; always probes the installed DeepGEMM.
- `static`: read the SM90 metadata header for the guard. Needs nothing but the files.

The core returns a `ProbeResult`; it never prints and never exits. Standard library only, so that
`python -m dsv4ctl.probe` runs on a GPU node that has neither typer nor rich installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from dsv4ctl.files import temporary_directory
from dsv4ctl.probe.headers import (
    DeepGemmLocation,
    HeaderVerdict,
    find_effective_deepgemm,
    given_include,
    inspect_include_dir,
)

MODES = ("kernel", "python", "static")
# The upstream report's cases: (batch size, fill value of every context length).
UPSTREAM_CASES: tuple[tuple[int, int], ...] = (
    (256, 0), (64, 0), (32, 0), (33, 0), (250, 0), (8, 0), (256, 1), (256, 8192),
)
LAUNCHER_SOURCE = Path(__file__).with_name("deepgemm_sm90_metadata.cu")
# DeepGEMM's SM90 kernels are built for sm_90a (see DeepGEMM's JIT compiler flags).
NVCC_ARCH_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)
CASE_TIMEOUT_S = 120
COMPILE_TIMEOUT_S = 600

# Case outcomes.
OK = "ok"
FAULT = "fault"  # the process died with a CUDA error (the illegal memory access)
ERROR = "error"  # something else went wrong; says nothing about the bug


@dataclass(frozen=True)
class ProbeCase:
    batch_size: int
    fill: int
    outcome: str
    detail: str = ""

    @property
    def expected_if_affected(self) -> str:
        """What the unguarded kernel does with this case (upstream report, reproduced on H200):
        the out-of-bounds read faults only when every length is zero and B is a multiple of 32."""
        return FAULT if self.fill == 0 and self.batch_size % 32 == 0 else OK

    def to_json(self) -> dict[str, object]:
        return {"batch_size": self.batch_size, "fill": self.fill, "outcome": self.outcome,
                "expected_if_affected": self.expected_if_affected, "detail": self.detail}


@dataclass(frozen=True)
class ProbeResult:
    """The answer. `affected` is True, False, or None when the probe could not tell (`reason`)."""

    mode: str | None
    affected: bool | None
    reason: str
    cases: tuple[ProbeCase, ...] = ()
    deepgemm: DeepGemmLocation | None = None
    header: HeaderVerdict | None = None
    tried: tuple[tuple[str, str], ...] = ()  # stronger modes that were not available, and why
    details: dict[str, object] = field(default_factory=dict)  # compiler, device, launch form...

    def to_json(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "affected": self.affected,
            "reason": self.reason,
            "cases": [case.to_json() for case in self.cases],
            "deepgemm": self.deepgemm.to_json() if self.deepgemm else None,
            "header": self.header.to_json() if self.header else None,
            "unavailable_modes": [{"mode": m, "reason": r} for m, r in self.tried],
            "details": self.details,
        }


class ProbeUnavailable(Exception):
    """This mode cannot run here (no GPU, no compiler, no vLLM...); the message says why."""


def _verdict_from_cases(cases: tuple[ProbeCase, ...]) -> tuple[bool | None, str]:
    errors = [c for c in cases if c.outcome == ERROR]
    if errors:
        first = errors[0]
        return None, f"{len(errors)} case(s) failed for another reason (B={first.batch_size}: {first.detail})"
    faulted = [c for c in cases if c.outcome == FAULT]
    if not faulted:
        return False, f"all {len(cases)} cases ran cleanly"
    nonzero_faults = [c for c in faulted if c.fill != 0]
    if nonzero_faults:
        return None, ("non-zero lengths fault too (B=" + ", ".join(str(c.batch_size) for c in nonzero_faults)
                      + "): not the all-zero-lengths bug; check the GPU and driver")
    bs = ", ".join(str(c.batch_size) for c in faulted)
    return True, f"all-zero context lengths fault at B = {bs}; non-zero lengths run cleanly"


# --------------------------------------------------------------------------------------------- static

def probe_static(location: DeepGemmLocation | None) -> ProbeResult:
    if location is None:
        return ProbeResult("static", None, "no DeepGEMM found: neither an external `deep_gemm` package nor "
                           "vLLM's vendored copy (vllm/third_party/deep_gemm) is installed")
    verdict = inspect_include_dir(location.include_dir)
    affected = None if verdict.guarded is None else not verdict.guarded
    return ProbeResult("static", affected, verdict.reason, deepgemm=location, header=verdict)


# --------------------------------------------------------------------------------------------- kernel

def find_nvcc() -> Path | None:
    """The nvcc DeepGEMM's JIT would use: DG_JIT_NVCC_COMPILER, then $CUDA_HOME/bin, then PATH,
    then /usr/local/cuda/bin."""
    candidates = [os.environ.get("DG_JIT_NVCC_COMPILER")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(str(Path(os.environ[var]) / "bin" / "nvcc"))
    candidates += [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    return None


def nvcc_version(nvcc: Path) -> str:
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    for line in out.splitlines():
        if "release" in line:
            return line.strip()
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def launch_form(verdict: HeaderVerdict) -> int | None:
    """1: kernel takes `num_next_n_atoms` (DeepGEMM as vendored by vLLM >= 0.28); 0: the 0.27.x form."""
    legacy = ("batch_size", "next_n", "is_context_lens_2d", "context_lens", "indices", "schedule_metadata")
    current = ("batch_size", "next_n", "is_context_lens_2d", "num_next_n_atoms", "context_lens", "indices",
               "schedule_metadata")
    template = ("kAlignedBatchSize", "SPLIT_KV", "kNumSMs", "kIsVarlen")
    if verdict.template_params != template:
        return None
    if verdict.kernel_params == current:
        return 1
    if verdict.kernel_params == legacy:
        return 0
    return None


def compile_command(nvcc: Path, include_dirs: list[Path], num_sms: int, form: int, output: Path,
                    source: Path = LAUNCHER_SOURCE) -> list[str]:
    cmd = [str(nvcc), "-std=c++17", "-O2", *NVCC_ARCH_FLAGS]
    for inc in include_dirs:
        cmd.append(f"-I{inc}")
    cmd += [f"-DDSV4CTL_NUM_SMS={num_sms}", f"-DDSV4CTL_DG_NUM_NEXT_N_ATOMS={form}", str(source), "-o", str(output)]
    return cmd


def build_launcher(nvcc: Path, include_dirs: list[Path], num_sms: int, form: int, output: Path) -> list[str]:
    """Compile the launcher for a device with `num_sms` SMs. Returns the command; raises
    ProbeUnavailable with nvcc's own words when it does not compile. Needs no GPU."""
    cmd = compile_command(nvcc, include_dirs, num_sms, form, output)
    try:
        built = _run(cmd, COMPILE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeUnavailable(f"nvcc failed to build the launcher: {exc}") from None
    if built.returncode != 0:
        raise ProbeUnavailable(f"nvcc failed to build the launcher: {_tail(built.stderr, 600)}")
    return cmd


def query_command(nvcc: Path, output: Path, source: Path = LAUNCHER_SOURCE) -> list[str]:
    return [str(nvcc), "-std=c++17", "-DDSV4CTL_QUERY_ONLY", str(source), "-o", str(output)]


def _run(cmd: list[str], timeout: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _last_json_line(text: str) -> dict[str, object] | None:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def _tail(text: str, limit: int = 300) -> str:
    text = " ".join(text.strip().split())
    return text if len(text) <= limit else "..." + text[-limit:]


def _classify_case(b: int, fill: int, proc: subprocess.CompletedProcess[str]) -> ProbeCase:
    """One case's process (the launcher or the python repro; both print one JSON line and exit 3 on
    a CUDA error) -> its outcome."""
    line = _last_json_line(proc.stdout) or {}
    if proc.returncode == 0 and line.get("status") == "ok":
        detail = "" if line.get("sentinel_ok") in (True, None) else "schedule sentinel not written"
        return ProbeCase(b, fill, OK, detail)
    if proc.returncode == 3 or line.get("status") == "cuda-error":
        return ProbeCase(b, fill, FAULT, str(line.get("error") or _tail(proc.stderr)))
    if proc.returncode < 0:
        return ProbeCase(b, fill, FAULT, f"killed by signal {-proc.returncode}")
    return ProbeCase(b, fill, ERROR, f"exit {proc.returncode}: {line.get('error') or _tail(proc.stderr or proc.stdout)}")


def _run_cases(command: list[str], cases: tuple[tuple[int, int], ...], timeout: int,
               env: dict[str, str] | None = None) -> tuple[ProbeCase, ...]:
    """Run `command <batch_size> <fill>` once per case, each in its own process (an illegal memory
    access poisons the CUDA context for the rest of a process)."""
    results = []
    for b, fill in cases:
        try:
            proc = subprocess.run([*command, str(b), str(fill)], capture_output=True, text=True, timeout=timeout,
                                  env=env)
        except subprocess.TimeoutExpired:
            results.append(ProbeCase(b, fill, ERROR, f"timed out after {timeout} s"))
            continue
        results.append(_classify_case(b, fill, proc))
    return tuple(results)


def probe_kernel(location: DeepGemmLocation | None, extra_includes: list[Path] | None = None,
                 nvcc: Path | None = None, cases: tuple[tuple[int, int], ...] = UPSTREAM_CASES) -> ProbeResult:
    """Raises ProbeUnavailable when this node cannot run the kernel probe."""
    if location is None:
        raise ProbeUnavailable("no DeepGEMM found to compile against")
    verdict = inspect_include_dir(location.include_dir)
    if not verdict.exists:
        raise ProbeUnavailable(verdict.reason)
    form = launch_form(verdict)
    if form is None:
        raise ProbeUnavailable(f"unknown kernel signature in {verdict.header}: template <{', '.join(verdict.template_params)}>"
                               f" ({', '.join(verdict.kernel_params)})")
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise ProbeUnavailable("no nvcc found (DG_JIT_NVCC_COMPILER, $CUDA_HOME/bin, PATH, /usr/local/cuda/bin)")
    includes = [location.include_dir, *(extra_includes or [])]
    if not any((inc / "cute").is_dir() for inc in includes):
        raise ProbeUnavailable(f"no cute/cutlass headers next to {location.include_dir}; pass the directory that "
                               "holds cute/ and cutlass/ (--cutlass-include)")
    details: dict[str, object] = {"nvcc": str(nvcc), "nvcc_version": nvcc_version(nvcc),
                                  "launch_form": "num_next_n_atoms" if form else "legacy",
                                  "include_dirs": [str(i) for i in includes], "split_kv": 256, "next_n": 1}
    with temporary_directory("dsv4ctl-probe-") as tmp:
        tmpdir = Path(tmp)
        query_bin = tmpdir / "query"
        try:
            built = _run(query_command(nvcc, query_bin), COMPILE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ProbeUnavailable(f"nvcc failed to build the device query: {exc}") from None
        if built.returncode != 0:
            raise ProbeUnavailable(f"nvcc failed to build the device query: {_tail(built.stderr)}")
        queried = _run([str(query_bin)], CASE_TIMEOUT_S)
        device = _last_json_line(queried.stdout) or {}
        if device.get("status") != "ok":
            raise ProbeUnavailable(f"no usable CUDA device: {device.get('error') or _tail(queried.stderr)}")
        details["device"] = device
        cc = (device.get("cc_major"), device.get("cc_minor"))
        if cc != (9, 0):
            raise ProbeUnavailable(f"GPU 0 ({device.get('name')}) is SM {cc[0]}.{cc[1]}; the SM90 metadata kernel "
                                   "only runs on SM 9.0 (H100/H200/GH200)")
        num_sms = int(device["num_sms"])
        launcher = tmpdir / "launcher"
        details["compile_command"] = " ".join(build_launcher(nvcc, includes, num_sms, form, launcher))
        found = _run_cases([str(launcher)], cases, CASE_TIMEOUT_S)
    affected, reason = _verdict_from_cases(found)
    return ProbeResult("kernel", affected, reason, found, location, verdict, details=details)


# --------------------------------------------------------------------------------------------- python

# The upstream report's repro, one case per process (`python -c ... <batch_size> <fill>`).
# Exit 3 = CUDA error in the call, 4 = setup.
_PYTHON_CASE = r"""
import json, sys
b, fill = int(sys.argv[1]), int(sys.argv[2])
try:
    import torch
    from vllm.utils.deep_gemm import get_paged_mqa_logits_metadata
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    ctx = torch.full((b, 1), fill, dtype=torch.int32, device="cuda")
except Exception as exc:
    print(json.dumps({"status": "setup-error", "error": f"{type(exc).__name__}: {exc}"})); sys.exit(4)
try:
    get_paged_mqa_logits_metadata(ctx, 64, num_sms)
    torch.cuda.synchronize()
except Exception as exc:
    print(json.dumps({"status": "cuda-error", "error": f"{type(exc).__name__}: {exc}"[:400]})); sys.exit(3)
print(json.dumps({"status": "ok"}))
"""

_PYTHON_PREFLIGHT = r"""
import json
info = {}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda"] = torch.cuda.is_available()
    if info["cuda"]:
        p = torch.cuda.get_device_properties(0)
        info["name"], info["cc"], info["num_sms"] = p.name, [p.major, p.minor], p.multi_processor_count
    import vllm
    info["vllm"] = getattr(vllm, "__version__", "unknown")
    from vllm.utils.import_utils import has_deep_gemm
    info["has_deep_gemm"] = bool(has_deep_gemm())
except Exception as exc:
    info["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(info))
"""


def probe_python(python: str | None = None, cases: tuple[tuple[int, int], ...] = UPSTREAM_CASES) -> ProbeResult:
    python = python or sys.executable
    env = {**os.environ, "DSV4CTL_FIXES": "none"}
    try:
        pre = subprocess.run([python, "-c", _PYTHON_PREFLIGHT], capture_output=True, text=True,
                             timeout=CASE_TIMEOUT_S * 2, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeUnavailable(f"cannot run {python}: {exc}") from None
    info = _last_json_line(pre.stdout) or {"error": _tail(pre.stderr)}
    if "torch" not in info:
        raise ProbeUnavailable(f"torch is not importable: {info.get('error')}")
    if not info.get("cuda"):
        raise ProbeUnavailable("torch sees no CUDA GPU")
    if "vllm" not in info:
        raise ProbeUnavailable(f"vLLM is not importable: {info.get('error')}")
    if not info.get("has_deep_gemm"):
        raise ProbeUnavailable(f"vLLM {info.get('vllm')} finds no DeepGEMM ({info.get('error', 'has_deep_gemm() is False')})")
    if info.get("cc") != [9, 0]:
        raise ProbeUnavailable(f"GPU 0 is SM {info.get('cc')}; the SM90 metadata kernel only runs on SM 9.0")
    found = _run_cases([python, "-c", _PYTHON_CASE], cases, CASE_TIMEOUT_S * 5, env)
    affected, reason = _verdict_from_cases(found)
    location = find_effective_deepgemm()
    verdict = inspect_include_dir(location.include_dir) if location else None
    return ProbeResult("python", affected, reason, found, location, verdict, details={"runtime": info})


# --------------------------------------------------------------------------------------------- choice

def run_probe(mode: str | None = None, include: str | Path | None = None,
              extra_includes: list[Path] | None = None) -> ProbeResult:
    """Run one mode, or (mode None) the strongest available: kernel, then python, then static.

    With `include`, probes that DeepGEMM include directory instead of the effective one; the
    python mode then does not apply (it always runs the installed DeepGEMM)."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    location = given_include(include) if include is not None else find_effective_deepgemm()
    order = [mode] if mode else list(MODES)
    tried: list[tuple[str, str]] = []
    for candidate in order:
        try:
            if candidate == "kernel":
                result = probe_kernel(location, extra_includes)
            elif candidate == "python":
                if include is not None:
                    raise ProbeUnavailable("--include was given; the python mode always runs the installed DeepGEMM")
                result = probe_python()
            else:
                result = probe_static(location)
        except ProbeUnavailable as exc:
            tried.append((candidate, str(exc)))
            continue
        return replace(result, tried=tuple(tried))
    reason = "; ".join(f"{m}: {r}" for m, r in tried)
    verdict = inspect_include_dir(location.include_dir) if location else None
    return ProbeResult(mode, None, reason, (), location, verdict, tuple(tried))
