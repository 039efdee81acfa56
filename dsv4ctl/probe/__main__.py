"""`python -m dsv4ctl.probe deepgemm [--mode M] [--include DIR] [--cutlass-include DIR] [--json]`

The same probe as `dsv4ctl probe deepgemm`, runnable with only the standard library (no typer,
no rich): for GPU nodes where dsv4ctl is on PYTHONPATH but not installed. Plain-text table, or the
same JSON document as the CLI. Exit 7 when affected, 0 when not, 1 when it cannot tell.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dsv4ctl.errors import ExitCode
from dsv4ctl.probe.deepgemm import MODES, ProbeResult, run_probe


def exit_code(result: ProbeResult) -> ExitCode:
    if result.affected is True:
        return ExitCode.AFFECTED
    if result.affected is False:
        return ExitCode.OK
    return ExitCode.ERROR


def plain_lines(result: ProbeResult) -> list[str]:
    lines = []
    if result.deepgemm:
        where = result.deepgemm.package_dir or result.deepgemm.include_dir
        lines.append(f"DeepGEMM: {result.deepgemm.source} ({where})")
    if result.header:
        lines.append(f"header:   {result.header.header}")
        lines.append(f"          {result.header.reason}")
    for key in ("nvcc_version", "launch_form"):
        if key in result.details:
            lines.append(f"{key}: {result.details[key]}")
    device = result.details.get("device")
    if isinstance(device, dict):
        lines.append(f"device:   {device.get('name')} SM {device.get('cc_major')}.{device.get('cc_minor')}, "
                     f"{device.get('num_sms')} SMs")
    for mode, why in result.tried:
        lines.append(f"{mode} mode unavailable: {why}")
    if result.cases:
        lines.append("")
        lines.append(f"{'B':>5} {'fill':>6}  {'result':<7} {'unguarded kernel':<16} detail")
        for case in result.cases:
            lines.append(f"{case.batch_size:>5} {case.fill:>6}  {case.outcome:<7} {case.expected_if_affected:<16} "
                         f"{case.detail}")
    lines.append("")
    verdict = {True: "AFFECTED", False: "not affected", None: "cannot tell"}[result.affected]
    lines.append(f"verdict ({result.mode or 'no mode'}): {verdict}: {result.reason}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dsv4ctl.probe")
    parser.add_argument("what", choices=["deepgemm"])
    parser.add_argument("--mode", choices=MODES, default=None)
    parser.add_argument("--include", default=None, help="DeepGEMM include directory (holds deep_gemm/)")
    parser.add_argument("--cutlass-include", action="append", default=[],
                        help="extra include directory holding cute/ and cutlass/ (repeatable)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run_probe(args.mode, args.include, [Path(p) for p in args.cutlass_include])
    if args.json:
        print(json.dumps({"schema_version": 1, **result.to_json()}, indent=2))
    else:
        print("\n".join(plain_lines(result)))
    return int(exit_code(result))


if __name__ == "__main__":
    sys.exit(main())
