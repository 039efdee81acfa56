"""Human-readable output of `dsv4ctl gpus`. The JSON form is `GpuSnapshot.to_json()` itself."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from dsv4ctl.gpu import GpuDevice, GpuSnapshot
from dsv4ctl.host import HostMemory
from dsv4ctl.render import print_prose, wrap_prose
from dsv4ctl.render.tables import counted, fit_table, group_same, index_ranges, natural_width, pack
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


def gpus_table(snapshot: GpuSnapshot, narrow: bool = False) -> Table:
    """One row per kind of device; memory columns in GiB (two decimals, as vLLM logs memory).

    Devices whose row reads the same collapse into one (`0-7  8 × NVIDIA H200`); a device that
    differs in any figure (less free memory, another model) keeps a row of its own, so the row says
    which GPU it is rather than hiding it in a range. The `nvml` column is shown only where
    CUDA_VISIBLE_DEVICES renumbers the devices; its indices follow the `cuda` ones in order.
    `narrow` puts the two-word header on two lines. Only the name wraps; figures are never cut."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=(0, 1), collapse_padding=True)
    renumbered = any(d.index != d.cuda_index for d in snapshot.devices)

    def figures(d: GpuDevice) -> tuple[str, ...]:
        return (
            d.name + (" [MIG]" if d.is_mig else ""),
            d.sm,
            _gib(d.total_bytes),
            _gib(d.reserved_bytes) if d.reserved_bytes is not None else "n/a",
            _gib(d.cuda_total_bytes),
            _gib(d.used_bytes),
            _gib(d.free_bytes),
            d.memory_struct,
        )

    headers = ("cuda", "nvml", "name", "sm", "total", "reserved", "CUDA total", "used", "free", "memory")
    for header in headers:
        if header == "nvml" and not renumbered:
            continue
        if header == "name":
            table.add_column(header)
        else:
            table.add_column(header.replace(" ", "\n") if narrow else header,
                             justify="left" if header in ("sm", "memory") else "right", no_wrap=True)
    for group in group_same(snapshot.devices, figures):
        name, *rest = figures(group[0])
        nvml = (index_ranges([d.index for d in group]),) if renumbered else ()
        table.add_row(index_ranges([d.cuda_index for d in group]), *nvml, counted(name, len(group)), *rest)
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


def host_memory_line(memory: HostMemory) -> str:
    """The host's RAM in one line: available of total (what pinned host tables such as DeepSeek-V4.1's Engram draw
    on), and /dev/shm where it was read."""
    where = ", ".join(p for p in (memory.hostname, memory.source) if p)
    shm = (f"; /dev/shm {format_gib(memory.shm_free_bytes)} free of {format_gib(memory.shm_total_bytes)}"
           if memory.shm_total_bytes is not None and memory.shm_free_bytes is not None else "")
    return f"{format_gib(memory.available_bytes)} available of {format_gib(memory.total_bytes)} ({where}){shm}"


def render_gpus(snapshot: GpuSnapshot, console: Console) -> None:
    """The `dsv4ctl gpus` report: origin line, device table, UUIDs with their processes, legend."""
    table, narrow = gpus_table(snapshot), gpus_table(snapshot, narrow=True)
    layout = next((t for t in (table, narrow) if natural_width(console, t) <= console.width), None)
    if layout is None and fit_table(console, narrow):
        layout = narrow
    if layout is None:
        # Narrower than any layout of the table: it runs long rather than cut a figure (a long line
        # beats a wrong number), and the lines around it keep to its width.
        layout, console.width = table, natural_width(console, table)
    for line in pack(snapshot_origin(snapshot).split(" · "), console.width, sep=" · ", hang="  "):
        console.print(line, markup=False, soft_wrap=True)
    console.print(layout)
    if snapshot.host_memory is not None:
        print_prose(console, f"host memory: {host_memory_line(snapshot.host_memory)}")
    for d in snapshot.devices:
        for line in device_lines(d):
            for part in wrap_prose(line, console.width, subsequent_indent=" " * (len(line) - len(line.lstrip()) + 4)):
                console.print(part, markup=False, soft_wrap=True)
    console.print()
    print_prose(console, LEGEND)


LEGEND = (
    "Memory in GiB. CUDA total = total - reserved, the total torch.cuda.mem_get_info() reports; "
    "vLLM's budget is CUDA total x --gpu-memory-utilization."
)
