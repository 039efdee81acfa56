"""Human-readable output of `dsv4ctl probe deepgemm`: what was probed, the case table, the verdict."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from dsv4ctl.probe.deepgemm import ProbeResult

VERDICT_TEXT = {True: "AFFECTED", False: "not affected", None: "cannot tell"}


def probe_header_lines(result: ProbeResult) -> list[str]:
    lines = []
    if result.deepgemm:
        where = result.deepgemm.package_dir or result.deepgemm.include_dir
        lines.append(f"DeepGEMM  {result.deepgemm.source} ({where})")
    if result.header:
        lines.append(f"header    {result.header.header}")
        lines.append(f"          {result.header.reason}")
    device = result.details.get("device")
    if isinstance(device, dict):
        lines.append(f"device    {device.get('name')}, SM {device.get('cc_major')}.{device.get('cc_minor')}, "
                     f"{device.get('num_sms')} SMs")
    if "nvcc_version" in result.details:
        lines.append(f"nvcc      {result.details['nvcc_version']} ({result.details.get('nvcc')})")
    if "launch_form" in result.details:
        lines.append(f"launch    {result.details['launch_form']} kernel signature, SPLIT_KV "
                     f"{result.details.get('split_kv')}, next_n {result.details.get('next_n')}")
    runtime = result.details.get("runtime")
    if isinstance(runtime, dict):
        lines.append(f"runtime   vLLM {runtime.get('vllm')}, torch {runtime.get('torch')}, {runtime.get('name')}")
    for mode, why in result.tried:
        lines.append(f"{mode} mode unavailable: {why}")
    return lines


def cases_table(result: ProbeResult) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for header, justify in (("B", "right"), ("fill", "right"), ("result", "left"),
                            ("unguarded kernel", "left"), ("detail", "left")):
        table.add_column(header, justify=justify, no_wrap=header != "detail")
    for case in result.cases:
        table.add_row(str(case.batch_size), str(case.fill), case.outcome, case.expected_if_affected, case.detail)
    return table


def verdict_line(result: ProbeResult) -> str:
    return f"Verdict ({result.mode or 'no mode ran'}): {VERDICT_TEXT[result.affected]}: {result.reason}"


def render_probe(result: ProbeResult, console: Console) -> None:
    for line in probe_header_lines(result):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if result.cases:
        console.print()
        console.print(cases_table(result))
    console.print()
    console.print(verdict_line(result), markup=False, highlight=False, soft_wrap=True)
