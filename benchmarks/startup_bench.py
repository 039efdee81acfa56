#!/usr/bin/env python3
"""`dsv4ctl diagnose` on a small log against a minimal Typer + Rich app that reads the same file.

    python benchmarks/startup_bench.py                    # both logs below, 15 runs of each, alternating
    python benchmarks/startup_bench.py --log excerpts --runs 5 --json

On a small log the time is Python's start-up and imports. The yardstick is the least a Typer + Rich
command can do with the file: read it and print one table (written to a temporary file and run the same
way). Two logs of 100 KB:

- `serving`: the first 100 KB of the `serving` benchmark log (benchmarks/prodlogs.py: a startup and the
  first requests), a healthy start;
- `excerpts`: real error excerpts, ../shared/real-logs/logs/r1-019* then the other r1-* files in name
  order, in turn until 100 KB (they hold 37 KB), cut at the last whole line: dozens of starts that
  failed, most of them in words no signature knows, so diagnose opens the message index.

Both programs run with their bytecode compiled (an untimed run of each writes the caches first) and
stdout to a pipe, the way the timing reads it; the runs alternate so a busy machine slows both alike.
Reported per log: min and median wall seconds, the ratio of the medians, and the target (docs/diagnose.md,
Speed: at most 1.5x the minimal app on the excerpts).
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
REAL_LOGS = REPO.parent / "shared" / "real-logs" / "logs"
TARGET = {"excerpts": 1.5}
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


def excerpts_log(size: int) -> bytes:
    """r1-019* then the other r1-* excerpts (name order), repeated until `size` bytes, cut at a whole line."""
    files = sorted(REAL_LOGS.glob("r1-019*")) + sorted(p for p in REAL_LOGS.glob("r1-*") if not p.name.startswith("r1-019"))
    if not files:
        raise SystemExit(f"{REAL_LOGS} holds no r1-* excerpts (a clone without ../shared): nothing to measure")
    parts = [b if b.endswith(b"\n") else b + b"\n" for b in (p.read_bytes() for p in files)]
    one = b"".join(parts)
    data = (one * (size // len(one) + 1))[:size]
    return data[: data.rindex(b"\n") + 1]


def measure(name: str, log: Path, app: Path, runs: int) -> dict:
    cmds = {
        "dsv4ctl diagnose": [sys.executable, "-m", "dsv4ctl", "diagnose", str(log)],
        "minimal Typer + Rich app": [sys.executable, str(app), str(log)],
    }
    for cmd in cmds.values():  # warm the page cache and the bytecode caches (untimed)
        _time(cmd)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(runs):
        for key, cmd in cmds.items():
            times[key].append(_time(cmd))
    result = {
        "log": name,
        "log_bytes": log.stat().st_size,
        "runs": runs,
        "seconds": {k: {"min": round(min(v), 3), "median": round(statistics.median(v), 3)} for k, v in times.items()},
    }
    ours, ref = (statistics.median(times[k]) for k in cmds)
    result["ratio_of_medians"] = round(ours / ref, 2)
    if name in TARGET:
        result["target"] = TARGET[name]
        result["ok"] = result["ratio_of_medians"] <= TARGET[name]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--bytes", type=int, default=100_000, help="log size (default 100 KB)")
    parser.add_argument("--log", choices=["serving", "excerpts", "all"], default="all")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    names = ["serving", "excerpts"] if args.log == "all" else [args.log]
    results = []
    with tempfile.TemporaryDirectory(prefix="dsv4ctl-startup-") as tmp:
        app = Path(tmp) / "minimal_app.py"
        app.write_text(MINIMAL_APP)
        for name in names:
            log = Path(tmp) / f"{name}.log"
            if name == "serving":
                big = Path(tmp) / "serving-2m.log"
                prodlogs.write("serving", big, 2 << 20)
                data = big.read_bytes()[: args.bytes]
                log.write_bytes(data[: data.rindex(b"\n") + 1])
            else:
                log.write_bytes(excerpts_log(args.bytes))
            results.append(measure(name, log, app, args.runs))
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"load_1min": round(load, 2), "results": results}, indent=2))
    else:
        for r in results:
            print(f"{r['log']}: {r['log_bytes']:,} bytes, {r['runs']} runs of each")
            for key, t in r["seconds"].items():
                print(f"  {key}: min {t['min']:.3f} s, median {t['median']:.3f} s")
            goal = f" (target <= {r['target']}x: {'ok' if r['ok'] else 'MISSED'})" if "target" in r else ""
            print(f"  dsv4ctl diagnose / minimal app (medians): {r['ratio_of_medians']:.2f}x{goal}")
        print(f"load average (1 min) at the end: {load:.2f}")
    return 0 if all(r.get("ok", True) for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
