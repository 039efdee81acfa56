#!/usr/bin/env python3
"""Write the exit-code table of `dsv4ctl.errors.ExitCode` into README.md and docs/exit-codes.md, between their
`<!-- exit-codes:begin -->` and `<!-- exit-codes:end -->` markers (`--check`: exit 1 when either differs)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dsv4ctl.errors import exit_code_markdown  # noqa: E402

FILES = (ROOT / "README.md", ROOT / "docs" / "exit-codes.md")
BLOCK = re.compile(r"(<!-- exit-codes:begin -->\n).*?(\n<!-- exit-codes:end -->)", re.DOTALL)


def rendered(text: str) -> str:
    return BLOCK.sub(lambda m: m.group(1) + "\n" + exit_code_markdown() + "\n" + m.group(2), text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        if not BLOCK.search(text):
            print(f"{path}: no exit-codes markers", file=sys.stderr)
            return 1
        new = rendered(text)
        if new != text:
            stale.append(path)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for path in stale:
        print(f"{path}: {'differs from' if args.check else 'rewritten from'} dsv4ctl.errors.ExitCode", file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
