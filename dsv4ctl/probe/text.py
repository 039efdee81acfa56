"""The words of a `probe deepgemm` result: header lines, case table, verdict line and exit status.

Shared by `dsv4ctl probe deepgemm` (Rich, `dsv4ctl.render.probe`) and `python -m dsv4ctl.probe`
(plain text, for GPU nodes without typer/rich), so both print the same lines and the same table.
Standard library only.
"""

from __future__ import annotations

from pathlib import Path

from dsv4ctl.errors import ExitCode, UsageError
from dsv4ctl.probe.deepgemm import MODES, ProbeResult

VERDICT_TEXT = {True: "AFFECTED", False: "not affected", None: "cannot tell"}
# The case table's columns: (title, right-aligned).
CASE_COLUMNS: tuple[tuple[str, bool], ...] = (
    ("B", True), ("fill", True), ("result", False), ("unguarded kernel", False), ("detail", False),
)


def check_arguments(mode: str | None, include: str | None) -> None:
    """Reject a bad `--mode` or a missing `--include` directory (UsageError, exit 2)."""
    if mode is not None and mode not in MODES:
        raise UsageError(f"--mode must be one of {', '.join(MODES)}, not {mode!r}")
    if include is not None and not Path(include).expanduser().is_dir():
        raise UsageError(f"--include {include}: not a directory")


def exit_code(result: ProbeResult) -> ExitCode:
    """7 when affected, 0 when not, 1 when the probe cannot tell."""
    if result.affected is True:
        return ExitCode.AFFECTED
    if result.affected is False:
        return ExitCode.OK
    return ExitCode.ERROR


def header_lines(result: ProbeResult) -> list[str]:
    """What was probed, with what, and which stronger modes were unavailable and why."""
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


def case_rows(result: ProbeResult) -> list[tuple[str, ...]]:
    """One row per case, in CASE_COLUMNS' order."""
    return [(str(case.batch_size), str(case.fill), case.outcome, case.expected_if_affected, case.detail)
            for case in result.cases]


def verdict_line(result: ProbeResult) -> str:
    return f"Verdict ({result.mode or 'no mode ran'}): {VERDICT_TEXT[result.affected]}: {result.reason}"


def plain_lines(result: ProbeResult) -> list[str]:
    """The whole report as plain text: header lines, the case table (columns padded to width), verdict."""
    lines = header_lines(result)
    rows = case_rows(result)
    if rows:
        widths = [max(len(title), *(len(row[i]) for row in rows)) for i, (title, _) in enumerate(CASE_COLUMNS)]

        def line(cells) -> str:
            padded = [cell.rjust(width) if right else cell.ljust(width)
                      for cell, width, (_, right) in zip(cells, widths, CASE_COLUMNS)]
            return "  ".join(padded).rstrip()

        lines += ["", line(title for title, _ in CASE_COLUMNS), "  ".join("-" * w for w in widths)]
        lines += [line(row) for row in rows]
    lines += ["", verdict_line(result)]
    return lines
