"""Human-readable output of `dsv4ctl gpus`. The JSON form is `GpuSnapshot.to_json()` itself."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from dsv4ctl.gpu import GpuDevice, GpuSnapshot
from dsv4ctl.units import format_gib, gib


def snapshot_origin(snapshot: GpuSnapshot) -> str:
    """`host h200-1 · driver 580.159.04 · CUDA 13.0 · CUDA_VISIBLE_DEVICES unset`."""
    parts = [f"host {snapshot.hostname}"]
    if snapshot.source == "file":
        parts.append(f"snapshot taken {snapshot.taken_at}")
    parts.append(f"driver {snapshot.driver_version or 'unknown'}")
    if snapshot.cuda_driver_version:
        parts.append(f"CUDA {snapshot.cuda_driver_version}")
    cvd = snapshot.cuda_visible_devices
    parts.append("CUDA_VISIBLE_DEVICES unset" if cvd is None else f"CUDA_VISIBLE_DEVICES={cvd!r}")
    return " · ".join(parts)


def gpus_table(snapshot: GpuSnapshot) -> Table:
    """One row per device; memory columns in GiB (two decimals, as vLLM logs memory)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for header, justify in (
        ("cuda", "right"), ("nvml", "right"), ("name", "left"), ("sm", "left"),
        ("total GiB", "right"), ("reserved", "right"), ("CUDA total", "right"),
        ("used", "right"), ("free", "right"), ("memory", "left"),
    ):
        table.add_column(header, justify=justify, no_wrap=True)
    for d in snapshot.devices:
        table.add_row(
            str(d.cuda_index),
            str(d.index),
            d.name + (" [MIG]" if d.is_mig else ""),
            d.sm,
            _gib(d.total_bytes),
            _gib(d.reserved_bytes) if d.reserved_bytes is not None else "n/a",
            _gib(d.cuda_total_bytes),
            _gib(d.used_bytes),
            _gib(d.free_bytes),
            _memory_label(d),
        )
    return table


def _gib(n_bytes: int) -> str:
    return f"{gib(n_bytes):.2f}"


def _memory_label(d: GpuDevice) -> str:
    return {"v2": "v2", "v1": "v1 (no reserved figure)", "unified": "unified (host RAM)"}.get(
        d.memory_struct, d.memory_struct
    )


def device_lines(d: GpuDevice) -> list[str]:
    """`cuda:0  GPU-…  no processes`, then one indented line per process."""
    head = f"cuda:{d.cuda_index}  {d.uuid}"
    if not d.processes:
        return [f"{head}  no processes"]
    lines = [f"{head}  {len(d.processes)} process(es):"]
    for p in d.processes:
        used = format_gib(p.used_bytes) if p.used_bytes is not None else "memory n/a"
        lines.append(f"    pid {p.pid:<8} {p.name or '?':<24} {used}")
    return lines


def render_gpus(snapshot: GpuSnapshot, console: Console) -> None:
    """The `dsv4ctl gpus` report: origin line, device table, UUIDs with their processes, legend."""
    console.print(snapshot_origin(snapshot), markup=False)
    console.print(gpus_table(snapshot))
    for d in snapshot.devices:
        for line in device_lines(d):
            console.print(line, markup=False)
    console.print()
    console.print("CUDA total = total - reserved: the total torch.cuda.mem_get_info() reports;", markup=False)
    console.print("vLLM's budget is CUDA total x --gpu-memory-utilization.", markup=False)
