#!/usr/bin/env python3
"""Check `dsv4ctl gpus` against nvidia-smi and torch.cuda on a real GPU box.

What it compares (exit 0 when every check passes, 1 when one fails, 2 when it cannot run):
  1. dsv4ctl.gpu.read_snapshot() vs `nvidia-smi --query-gpu=...` per GPU, matched by UUID
     (nvidia-smi ignores CUDA_VISIBLE_DEVICES and reports MiB; its memory.total includes reserved).
  2. vs torch.cuda (when a CUDA build of torch is importable): device name, compute capability,
     UUID, and `torch.cuda.mem_get_info()[1] == GpuDevice.cuda_total_bytes` (NVML total - reserved),
     plus the free memory torch's own CUDA context costs.
  3. CUDA_VISIBLE_DEVICES handling: for several values, the devices dsv4ctl lists (by UUID, in
     order) vs the devices a fresh torch process actually gets from the CUDA runtime.
  4. The `dsv4ctl gpus --json` command itself, when typer and rich are importable: its devices
     match read_snapshot's, and its output loads back with load_snapshot (the --gpus format).

Needs: python3 >= 3.10 with nvidia-ml-py (`import pynvml`), nvidia-smi on PATH. Optional: torch
(CUDA build), psutil, typer + rich. Installs nothing and writes nothing outside --out.
Run from the repository root:

    PYTHONPATH=. python3 benchmarks/device/gpus_vs_nvidia_smi.py --out "${OUT:-/tmp/gpus-check}"

--out DIR keeps snapshot.json (a real `dsv4ctl gpus --json` snapshot), nvidia-smi.csv and
comparison.json there.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

MiB = 1 << 20
SMI_FIELDS = "index,name,uuid,memory.total,memory.used,memory.free,memory.reserved,compute_cap"
# nvidia-smi rounds MiB figures; static figures (total, reserved) must agree within this.
STATIC_TOLERANCE_MIB = 1.0
# free/used move while processes allocate; on an idle GPU they agree within rounding too.
IDLE_TOLERANCE_MIB = 2.0
BUSY_TOLERANCE_MIB = 512.0

failures: list[str] = []


def check(ok: bool, label: str, detail: str) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {label}: {detail}")
    if not ok:
        failures.append(f"{label}: {detail}")


def run_nvidia_smi() -> tuple[str, list[dict[str, str]]]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        print("nvidia-smi is not on PATH", file=sys.stderr)
        raise SystemExit(2)
    text = subprocess.run(
        [smi, f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader,nounits"],
        check=True, capture_output=True, text=True,
    ).stdout
    rows = [dict(zip(SMI_FIELDS.split(","), (v.strip() for v in row))) for row in csv.reader(io.StringIO(text)) if row]
    return text, rows


def mib(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def compare_with_smi(snapshot, rows) -> list[dict]:
    print("\n== dsv4ctl (NVML) vs nvidia-smi, matched by UUID (MiB = bytes / 2**20) ==")
    by_uuid = {r["uuid"]: r for r in rows}
    report = []
    for d in snapshot.devices:
        print(f"cuda:{d.cuda_index} (nvml {d.index}) {d.name} {d.uuid} memory struct {d.memory_struct}")
        row = by_uuid.get(d.uuid)
        if row is None:
            check(d.is_mig, "uuid", f"{d.uuid} not in nvidia-smi --query-gpu (expected only for MIG instances)")
            continue
        check(row["name"] == d.name, "name", f"smi {row['name']!r} vs {d.name!r}")
        check(int(row["index"]) == d.index, "nvml index", f"smi {row['index']} vs {d.index}")
        check(row["compute_cap"] == d.compute_capability_str, "compute capability",
              f"smi {row['compute_cap']} vs {d.compute_capability_str} ({d.sm})")
        busy = bool(d.processes)
        tolerance = BUSY_TOLERANCE_MIB if busy else IDLE_TOLERANCE_MIB
        entry = {"uuid": d.uuid, "busy": busy}
        pairs = [("memory.total", d.total_bytes, STATIC_TOLERANCE_MIB),
                 ("memory.free", d.free_bytes, tolerance), ("memory.used", d.used_bytes, tolerance)]
        if d.reserved_bytes is not None:
            pairs.append(("memory.reserved", d.reserved_bytes, STATIC_TOLERANCE_MIB))
        for field, ours, tol in pairs:
            smi_mib = mib(row[field])
            ours_mib = ours / MiB
            entry[field] = {"nvidia_smi_mib": smi_mib, "dsv4ctl_bytes": ours, "dsv4ctl_mib": round(ours_mib, 2)}
            if smi_mib is None:
                check(field == "memory.reserved", field, f"nvidia-smi says {row[field]!r}")
                continue
            check(abs(smi_mib - ours_mib) <= tol, field,
                  f"smi {smi_mib:.0f} MiB vs {ours:,} B = {ours_mib:.2f} MiB (tolerance {tol:g} MiB)")
        print(f"  CUDA total (NVML total - reserved) = {d.cuda_total_bytes:,} B = {d.cuda_total_bytes / MiB:.2f} MiB;"
              f" nvidia-smi total - reserved = {(mib(row['memory.total']) or 0) - (mib(row['memory.reserved']) or 0):.0f} MiB")
        report.append(entry)
    return report


TORCH_PROBE = r"""
import json, sys, torch
want_memory = sys.argv[1] == "memory"
out = {"available": torch.cuda.is_available(), "torch_count": torch.cuda.device_count(), "devices": []}
try:
    out["runtime_count"] = torch._C._cuda_getDeviceCount()  # cudaGetDeviceCount: the CUDA runtime's own answer
except Exception as exc:
    out["runtime_count"] = None
    out["runtime_error"] = str(exc)
for i in range(min(out["torch_count"], out["runtime_count"] or 0)):
    try:
        p = torch.cuda.get_device_properties(i)
        uuid = getattr(p, "uuid", None)
        dev = {"index": i, "name": p.name, "cc": [p.major, p.minor], "uuid": str(uuid) if uuid is not None else None}
        if want_memory:
            dev["free"], dev["total"] = torch.cuda.mem_get_info(i)
    except Exception as exc:
        dev = {"index": i, "error": f"{type(exc).__name__}: {exc}"}
    out["devices"].append(dev)
print(json.dumps(out))
"""


def torch_devices(env_value: str | None, memory: bool = False) -> dict:
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    if env_value is not None:
        env["CUDA_VISIBLE_DEVICES"] = env_value
    proc = subprocess.run([sys.executable, "-c", TORCH_PROBE, "memory" if memory else "names"],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def torch_importable() -> bool:
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0


def same_uuid(torch_uuid: str | None, nvml_uuid: str) -> bool | None:
    if torch_uuid is None:
        return None
    return nvml_uuid.split("-", 1)[1] == torch_uuid.removeprefix("GPU-").removeprefix("MIG-") if "-" in nvml_uuid else False


def compare_with_torch(snapshot) -> dict | None:
    print("\n== dsv4ctl (NVML) vs torch.cuda in a fresh process (same CUDA_VISIBLE_DEVICES) ==")
    if not torch_importable():
        print("  torch is not importable: skipped")
        return None
    result = torch_devices(snapshot.cuda_visible_devices, memory=True)
    if "error" in result or result.get("runtime_count") is None:
        print(f"  torch has no CUDA here ({result.get('error') or result.get('runtime_error') or 'CPU build'}): skipped")
        return result
    if not result["available"]:
        check(False, "torch.cuda", "torch.cuda.is_available() is False although dsv4ctl sees GPUs")
        return result
    check(len(result["devices"]) == len(snapshot.devices), "device count",
          f"torch {len(result['devices'])} vs dsv4ctl {len(snapshot.devices)}")
    for t, d in zip(result["devices"], snapshot.devices):
        print(f"cuda:{d.cuda_index} {d.name}")
        if "error" in t:
            check(False, "torch device", t["error"])
            continue
        check(t["name"] == d.name, "name", f"torch {t['name']!r} vs {d.name!r}")
        check(tuple(t["cc"]) == d.compute_capability, "compute capability", f"torch {t['cc']} vs {list(d.compute_capability)}")
        match = same_uuid(t["uuid"], d.uuid)
        if match is not None:
            check(match, "uuid", f"torch {t['uuid']} vs {d.uuid}")
        check(t["total"] == d.cuda_total_bytes, "cuda_total_bytes == torch.cuda.mem_get_info()[1]",
              f"torch {t['total']:,} B vs NVML total {d.total_bytes:,} - reserved {d.reserved_bytes or 0:,}"
              f" = {d.cuda_total_bytes:,} B (difference {t['total'] - d.cuda_total_bytes:+,} B)")
        print(f"  torch free {t['free']:,} B vs NVML free {d.free_bytes:,} B: torch's own CUDA context took "
              f"{d.free_bytes - t['free']:,} B = {(d.free_bytes - t['free']) / MiB:.0f} MiB")
    return result


def visible_values(snapshot) -> list[str | None]:
    gpus = [d for d in snapshot.devices if not d.is_mig]
    values: list[str | None] = [None, "0", gpus[0].uuid, gpus[0].uuid[:12], "", "-1", "0,0", "99", "0,99"]
    if len(gpus) > 1:
        values += ["1,0", f"{gpus[1].uuid},{gpus[0].uuid[:12]}", "1,abc,0"]
    return values


def compare_visible_devices(snapshot) -> list[dict]:
    print("\n== CUDA_VISIBLE_DEVICES: devices dsv4ctl lists vs devices a torch process gets ==")
    if snapshot.cuda_visible_devices is not None:
        print("  CUDA_VISIBLE_DEVICES is set for this run; the values below replace it")
    from dsv4ctl.errors import GpuUnavailableError
    from dsv4ctl.gpu import read_snapshot

    baseline = torch_devices(None) if torch_importable() else {"error": "not importable"}
    has_torch = "error" not in baseline and baseline.get("runtime_count") is not None
    if not has_torch:
        print(f"  torch with CUDA is not usable here ({baseline.get('error', 'no CUDA runtime')}): listing dsv4ctl only")
    rows = []
    for value in visible_values(snapshot):
        try:
            ours = [d.uuid for d in read_snapshot(value).devices]
            ours_text = ",".join(u[:12] for u in ours)
        except GpuUnavailableError as exc:
            ours, ours_text = [], f"error: {exc.message}"
        row = {"CUDA_VISIBLE_DEVICES": value, "dsv4ctl": ours}
        if has_torch:
            t = torch_devices(value)
            row["torch"] = t
            if "error" in t:
                check(False, f"CUDA_VISIBLE_DEVICES={value!r}", f"torch probe failed: {t['error']}")
            else:
                theirs = [dev.get("uuid") for dev in t["devices"]]
                counts = f"CUDA runtime {t['runtime_count']} / torch {t['torch_count']} / dsv4ctl {len(ours)} device(s)"
                if any(u is None for u in theirs):
                    check(t["runtime_count"] == len(ours), f"CUDA_VISIBLE_DEVICES={value!r}", counts + " (no uuid in torch)")
                else:
                    agree = t["runtime_count"] == len(ours) and len(theirs) == len(ours) and all(
                        same_uuid(t_u, o) for t_u, o in zip(theirs, ours))
                    check(agree, f"CUDA_VISIBLE_DEVICES={value!r}",
                          f"dsv4ctl [{ours_text}] vs torch [{','.join((u or '?')[:12] for u in theirs)}]; {counts}")
        else:
            print(f"  CUDA_VISIBLE_DEVICES={value!r}: dsv4ctl [{ours_text}] (no torch to compare)")
        rows.append(row)
    return rows


def check_cli(snapshot, out: Path | None) -> None:
    print("\n== `python -m dsv4ctl gpus --json` ==")
    if subprocess.run([sys.executable, "-c", "import typer, rich"], capture_output=True).returncode != 0:
        print("  typer/rich not importable: skipped (the core above is what the command calls)")
        return
    proc = subprocess.run([sys.executable, "-m", "dsv4ctl", "gpus", "--json"], capture_output=True, text=True)
    check(proc.returncode == 0, "exit status", f"{proc.returncode} {proc.stderr.strip()}")
    if proc.returncode != 0:
        return
    from dsv4ctl.gpu import load_snapshot

    path = (out or Path("/tmp")) / "cli-snapshot.json"
    path.write_text(proc.stdout)
    loaded = load_snapshot(path)
    check([d.uuid for d in loaded.devices] == [d.uuid for d in snapshot.devices], "devices",
          "same UUIDs in the same order as read_snapshot()")
    check([d.cuda_total_bytes for d in loaded.devices] == [d.cuda_total_bytes for d in snapshot.devices],
          "cuda_total_bytes", "same as read_snapshot()")
    table = subprocess.run([sys.executable, "-m", "dsv4ctl", "gpus"], capture_output=True, text=True,
                           env={**os.environ, "NO_COLOR": "1", "COLUMNS": "120"})
    print(table.stdout + table.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="directory for snapshot.json, nvidia-smi.csv, comparison.json")
    args = parser.parse_args()
    try:
        from dsv4ctl.errors import Dsv4ctlError
        from dsv4ctl.gpu import read_snapshot, save_snapshot
    except ImportError as exc:
        print(f"cannot import dsv4ctl.gpu ({exc}); run from the repository root with PYTHONPATH=.", file=sys.stderr)
        return 2
    try:
        snapshot = read_snapshot()
    except Dsv4ctlError as exc:
        print(f"dsv4ctl.gpu.read_snapshot() failed: {exc.message}\n  hint: {exc.hint}", file=sys.stderr)
        return 1
    smi_text, smi_rows = run_nvidia_smi()
    print(f"host {snapshot.hostname}, driver {snapshot.driver_version}, NVML {snapshot.nvml_version}, "
          f"CUDA {snapshot.cuda_driver_version}, CUDA_VISIBLE_DEVICES={snapshot.cuda_visible_devices!r}")
    for note in snapshot.notes:
        print(f"note: {note}")
    print(f"nvidia-smi --query-gpu={SMI_FIELDS} --format=csv,noheader,nounits:\n{smi_text.rstrip()}")

    comparison = {"smi": compare_with_smi(snapshot, smi_rows)}
    comparison["torch"] = compare_with_torch(snapshot)
    comparison["cuda_visible_devices"] = compare_visible_devices(snapshot)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        save_snapshot(snapshot, args.out / "snapshot.json")
        (args.out / "nvidia-smi.csv").write_text(smi_text)
    check_cli(snapshot, args.out)
    comparison["failures"] = failures
    if args.out:
        (args.out / "comparison.json").write_text(json.dumps(comparison, indent=2, default=str) + "\n")
    print(f"\n{len(failures)} failure(s)" + "".join(f"\n  - {f}" for f in failures))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
