"""`python -m dsv4ctl.probe deepgemm [--mode M] [--include DIR] [--cutlass-include DIR] [--json]`

The same probe as `dsv4ctl probe deepgemm`, runnable with only the standard library (no typer,
no rich): for GPU nodes where dsv4ctl is on PYTHONPATH but not installed. The same lines and case
table as the CLI (`dsv4ctl.probe.text`) in plain text, or the same JSON document. Exit 7 when
affected, 0 when not, 1 when it cannot tell, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dsv4ctl.errors import Dsv4ctlError
from dsv4ctl.probe.deepgemm import MODES, run_probe
from dsv4ctl.probe.text import check_arguments, exit_code, plain_lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dsv4ctl.probe")
    parser.add_argument("what", choices=["deepgemm"])
    parser.add_argument("--mode", choices=MODES, default=None)
    parser.add_argument("--include", default=None, help="DeepGEMM include directory (holds deep_gemm/)")
    parser.add_argument("--cutlass-include", action="append", default=[],
                        help="extra include directory holding cute/ and cutlass/ (repeatable)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        check_arguments(args.mode, args.include)
    except Dsv4ctlError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        return int(exc.exit_code)
    result = run_probe(args.mode, args.include, [Path(p).expanduser() for p in args.cutlass_include])
    if args.json:
        print(json.dumps({"schema_version": 1, **result.to_json()}, indent=2))
    else:
        print("\n".join(plain_lines(result)))
    return int(exit_code(result))


if __name__ == "__main__":
    sys.exit(main())
