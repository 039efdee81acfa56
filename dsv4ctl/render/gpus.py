"""Human-readable output of `dsv4ctl gpus`. The JSON form is `GpuSnapshot.to_json()` itself."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.measure import Measurement
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
    """One row per device; memory columns in GiB (two decimals, as vLLM logs memory).

    Fits 80 columns for one-GPU-model boxes; figures are never cropped (only the name may fold)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1), collapse_padding=True)
    rows = [
        (
            str(d.cuda_index),
            str(d.index),
            d.name + (" [MIG]" if d.is_mig else ""),
            d.sm,
            _gib(d.total_bytes),
            _gib(d.reserved_bytes) if d.reserved_bytes is not None else "n/a",
            _gib(d.cuda_total_bytes),
            _gib(d.used_bytes),
            _gib(d.free_bytes),
            d.memory_struct,
        )
        for d in snapshot.devices
    ]
    headers = ("cuda", "nvml", "name", "sm", "total", "reserved", "CUDA total", "used", "free", "memory")
    for position, header in enumerate(headers):
        widest = max([len(header)] + [len(row[position]) for row in rows])
        if header == "name":
            table.add_column(header, overflow="fold", min_width=min(widest, 12))
        else:
            table.add_column(header, justify="left" if header in ("sm", "memory") else "right",
                             no_wrap=True, min_width=widest)
    for row in rows:
        table.add_row(*row)
    return table


def _gib(n_bytes: int) -> str:
    return f"{gib(n_bytes):.2f}"


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
    table = gpus_table(snapshot)
    lines = [line for d in snapshot.devices for line in device_lines(d)]
    origin = snapshot_origin(snapshot)
    # Figures are data: never crop or wrap them to the terminal (or to 80 columns when piped).
    needed = max([Measurement.get(console, console.options, table).maximum, len(origin)] + [len(x) for x in lines])
    if needed > console.width:
        console.width = needed
    console.print(origin, markup=False)
    console.print(table)
    for line in lines:
        console.print(line, markup=False)
    console.print()
    for line in LEGEND:
        console.print(line, markup=False, soft_wrap=True)  # never re-wrapped at a pipe's 80 columns


LEGEND = (
    "Memory in GiB. CUDA total = total - reserved, the total torch.cuda.mem_get_info()",
    "reports; vLLM's budget is CUDA total x --gpu-memory-utilization.",
)
