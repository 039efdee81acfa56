#!/usr/bin/env python3
"""`dsv4ctl diagnose` on a small log against a minimal Typer + Rich app that reads the same file.

    python benchmarks/startup_bench.py            # 100 KB log, 15 runs of each, alternating
    python benchmarks/startup_bench.py --runs 3 --json

On a small log the time is Python's start-up and imports. The yardstick is the least a Typer + Rich
command can do with the file: read it and print one table (written to a temporary file and run the same
way). The log is the first 100 KB of the `serving` benchmark log (benchmarks/prodlogs.py: a startup and
the first requests). Both run with stdout to a pipe, the way the timing reads it; the runs alternate so
a busy machine slows both alike. Reported: min and median wall seconds and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import prodlogs  # noqa: E402

MINIMAL_APP = '''
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False)


@app.command()
def main(path: str) -> None:
    data = open(path, "rb").read()
    table = Table("lines", "bytes")
    table.add_row(str(data.count(b"\\n")), str(len(data)))
    Console().print(table)


if __name__ == "__main__":
    app()
'''


# As installed: pip compiles a package's bytecode, so both programs run with their caches written (an
# environment that sets PYTHONDONTWRITEBYTECODE would otherwise recompile dsv4ctl's modules on every run,
# and not the site-packages the minimal app uses).
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _time(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO, check=False, env=_ENV)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--bytes", type=int, default=100_000, help="log size (default 100 KB)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dsv4ctl-startup-") as tmp:
        big = Path(tmp) / "serving.log"
        prodlogs.write("serving", big, 2 << 20)
        log = Path(tmp) / "small.log"
        data = big.read_bytes()[: args.bytes]
        log.write_bytes(data[: data.rindex(b"\n") + 1])
        app = Path(tmp) / "minimal_app.py"
        app.write_text(MINIMAL_APP)
        cmds = {
            "dsv4ctl diagnose": [sys.executable, "-m", "dsv4ctl", "diagnose", str(log)],
            "minimal Typer + Rich app": [sys.executable, str(app), str(log)],
        }
        for cmd in cmds.values():  # warm the page cache and the bytecode caches (untimed)
            _time(cmd)
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for _ in range(args.runs):
            for name, cmd in cmds.items():
                times[name].append(_time(cmd))
        size = log.stat().st_size
    result = {
        "log_bytes": size,
        "runs": args.runs,
        "seconds": {k: {"min": round(min(v), 3), "median": round(statistics.median(v), 3)} for k, v in times.items()},
    }
    ours, ref = (statistics.median(times[k]) for k in cmds)
    result["ratio_of_medians"] = round(ours / ref, 2)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"log: {size:,} bytes, {args.runs} runs of each")
        for name, t in result["seconds"].items():
            print(f"{name}: min {t['min']:.3f} s, median {t['median']:.3f} s")
        print(f"dsv4ctl diagnose / minimal app (medians): {result['ratio_of_medians']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
