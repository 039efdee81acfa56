"""Human-readable output of `dsv4ctl doctor`: one screen to paste into a bug report.

Plain text lines (no colours needed to read it), so the pasted text keeps its meaning."""

from __future__ import annotations

import re
import time

from rich.console import Console

from dsv4ctl.doctor import DoctorReport
from dsv4ctl.render import print_prose
from dsv4ctl.render.gpus import host_memory_line
from dsv4ctl.units import format_gib


def _pkg_line(info: object, name: str) -> str:
    if not isinstance(info, dict) or not info:
        return "unknown"
    if not info.get("installed"):
        return "not installed"
    version = info.get("version") or "unknown version"
    extra = []
    if name == "vllm" and info.get("distribution"):
        extra.append(f"distribution {info['distribution']}")
    if name == "torch":
        if info.get("cuda"):
            extra.append(f"built for CUDA {info['cuda']}")
        elif info.get("hip"):
            extra.append(f"built for ROCm {info['hip']}")
        elif "cuda" in info:
            extra.append("CPU build")
        if "cuda_available" in info:
            extra.append(f"{info.get('device_count', 0)} CUDA device(s) visible" if info["cuda_available"]
                         else "no CUDA device")
    if info.get("importable") is False or info.get("import_error"):
        extra.append(f"DOES NOT IMPORT: {info.get('import_error')}")
    if info.get("location"):
        extra.append(str(info["location"]))
    return f"{version}" + (f" ({'; '.join(extra)})" if extra else "")


def _deepgemm_lines(info: object) -> list[str]:
    if not isinstance(info, dict) or not info:
        return ["DeepGEMM   unknown"]
    if info.get("error"):
        return [f"DeepGEMM   could not be located: {info['error']}"]
    if not info.get("found"):
        return ["DeepGEMM   none (no external deep_gemm package, no vendored vllm/third_party/deep_gemm)"]
    version = f" {info['version']}" if info.get("version") else ""
    lines = [f"DeepGEMM   {info.get('source')}{version} at {info.get('package_dir')}"]
    header = info.get("header") or {}
    guarded = header.get("guarded")
    state = {True: "has the all-zero guard", False: "LACKS the all-zero guard (affected)", None: "cannot tell"}[guarded]
    lines.append(f"           SM90 metadata kernel {state}: {header.get('reason')}")
    return lines


def doctor_lines(report: DoctorReport) -> list[str]:
    t = report.target
    python = t.get("python") if isinstance(t.get("python"), dict) else {}
    lines = [f"dsv4ctl    {report.dsv4ctl_version}"]
    if report.target_error:
        lines.append(f"Python     {report.target_python}: {report.target_error}")
    else:
        lines.append(f"Python     {python.get('version')} ({python.get('executable')})")
        lines.append(f"platform   {t.get('platform')}")
        lines.append(f"vLLM       {_pkg_line(t.get('vllm'), 'vllm')}")
        lines.append(f"torch      {_pkg_line(t.get('torch'), 'torch')}")
    snapshot = report.gpus
    driver = (snapshot and snapshot.driver_version) or "unknown"
    cuda = f", supports CUDA {snapshot.cuda_driver_version}" if snapshot and snapshot.cuda_driver_version else ""
    lines.append(f"driver     {driver}{cuda}")
    lines.append(f"nvcc       {report.nvcc or 'not found'}")
    if report.gpu_error:
        lines.append(f"GPUs       none readable: {report.gpu_error}")
    else:
        lines.append(f"GPUs       {len(snapshot.devices)}")
        lines.extend(f"  {line}" for line in snapshot.summary_lines())
    if report.host_memory is not None:
        lines.append(f"host RAM   {host_memory_line(report.host_memory)}")
    if not report.target_error:
        lines.extend(_deepgemm_lines(t.get("deepgemm")))
    env_value = "unset" if report.fixes_env is None else repr(report.fixes_env)
    lines.append(f"fixes      DSV4CTL_FIXES={env_value}; `dsv4ctl serve` uses 'all'")
    for f in report.fixes:
        if not f.checked:
            lines.append(f"  {f.name}: {f.reason}")
            continue
        if not f.applicable:
            need = "not applicable"
        else:
            need = {True: "needed", False: "not needed", None: "need unknown"}[f.needed]
        lines.append(f"  {f.name}: {need}; with DSV4CTL_FIXES: {f.under_env}; under serve: {f.under_serve}")
        lines.append(f"    why: {f.reason}")
    if report.environment:
        lines.append("environment")
        for var in report.environment:
            lines.append(f"  {var.name}={var.value}")
    else:
        lines.append("environment  no relevant variables set")
    lines.extend(_startup_plan_lines(report))
    for note in report.notes:
        lines.append(f"note: {note}")
    return lines


def _startup_plan_lines(report: DoctorReport) -> list[str]:
    """vLLM's startup plans: what each worker of an earlier start measured, and re-applies while it can."""
    plans = report.startup_plans
    if not plans:
        return [f"plans      no vLLM startup plans in {report.startup_plans_dir}"]
    lines = [f"plans      {len(plans)} vLLM startup plan{'s' if len(plans) != 1 else ''} in {report.startup_plans_dir}"]
    for p in plans:
        saved = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(p.modified))
        lines.append(f"  {p.fingerprint}: KV {format_gib(p.kv_cache_memory_bytes)}, free at start "
                     f"{format_gib(p.free_memory_baseline)}, saved {saved}")
    return lines


# Where a wrapped doctor line continues: under the value column (`vLLM       0.32.0 (…`), after a
# `why: ` label, or two spaces in from the line's own indent.
_VALUE_COLUMN = re.compile(r"^(\s*\S+(?: \S+)?\s{2,}|\s*[\w .-]+: )")


def render_doctor(report: DoctorReport, console: Console) -> None:
    """One line per fact; long ones wrap at spaces (paths stay whole) under their value column."""
    for line in doctor_lines(report):
        indent = len(line) - len(line.lstrip())
        column = _VALUE_COLUMN.match(line)
        hanging = " " * (len(column.group(1)) if column and len(column.group(1)) <= 24 else indent + 2)
        print_prose(console, line.strip(), indent=" " * indent, subsequent_indent=hanging)
