#!/usr/bin/env python3
"""`dsv4ctl diagnose` on the shared 1 GiB serving logs against `LC_ALL=C grep -c -E`, in the same run.

    python benchmarks/serving_log_bench.py                     # serving and engine25, 3 runs each
    python benchmarks/serving_log_bench.py --mode serving --runs 5 --json

The logs are written by ../shared/bench/make_serving_log.py (next to the checkout; its README gives the
reference command): `serving`, one healthy DeepSeek-V4 start, days of serving with ~1 % request-time
ERROR tracebacks, then a restart whose auto-fit reduced the length 1,048,576 -> 980,224; `engine25`, the
same with a quarter of the lines engine progress lines. The reference is grep with the catalogue's words
exactly as that README gives them (its output to a file: on /dev/null GNU grep stops at the first match).
diagnose runs with its bytecode compiled, as installed (an untimed run first). The runs start once the new file
is written back (`sync`) and read once untimed, so the page cache is warm for all of them; grep and diagnose
alternate, and the medians of `--runs` runs are reported, with their ratio (lower is better; 1.0 = grep's
time). diagnose must report the restart's auto-fit (`autofit.to` = 980224) or the run fails.

The targets (docs/diagnose.md, Speed): serving at most 1.0x grep, engine25 at most 3x, and diagnose's peak
resident memory (the largest of its processes, wait4's ru_maxrss) at most 150 MB. The load average at the end
of each mode is reported beside them (the machine may be shared).
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

REPO = Path(__file__).resolve().parent.parent
GENERATOR = REPO.parent / "shared" / "bench" / "make_serving_log.py"
# ../shared/bench/README.md: the reference command's pattern, the catalogue's words
GREP_PATTERN = (
    "Auto-fit max_model_len|reduced from [0-9]+ to [0-9]+|illegal memory access|AssertionError|OutOfMemoryError"
    r"|CUDA out of memory|_build_c128a_metadata|get_paged_mqa_logits_metadata|Available KV cache memory"
    r"|Capturing CUDA graphs|NCCL error|Traceback \(most recent call last\)|EngineCore failed|Cannot auto-fit"
    "|No available memory for the cache blocks|KV cache is needed|Unsupported architecture"
)
TARGET = {"serving": 1.0, "engine25": 3.0}
RSS_TARGET_MB = 150  # peak resident memory of diagnose (its largest process) on the 1 GiB log


# As installed: pip compiles a package's bytecode, so diagnose runs with its caches written (an environment that
# sets PYTHONDONTWRITEBYTECODE would otherwise recompile every module edited since the last write, on every run).
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _timed(cmd: list[str], out: Path, env: dict[str, str] | None = None, rss: list[int] | None = None) -> float:
    """Wall seconds of `cmd` (stdout to `out`); its peak RSS in bytes appended to `rss` (the largest of the process
    and its children, from wait4's rusage: diagnose's scanners are child processes)."""
    with open(out, "wb") as f:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.DEVNULL, env=env or _ENV)
        _pid, _status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t
    if rss is not None:
        rss.append(usage.ru_maxrss * 1024)  # Linux: kilobytes
    return seconds


def bench(mode: str, runs: int, workdir: Path) -> dict:
    log = workdir / f"{mode}.log"
    subprocess.run([sys.executable, str(GENERATOR), str(log), mode], check=True)
    os.sync()  # the new file's pages written back first: the kernel's writeback would slow whichever runs first
    with open(log, "rb") as f:  # warm the page cache
        while f.read(64 << 20):
            pass
    grep_cmd = ["grep", "-c", "-E", GREP_PATTERN, str(log)]
    cmd = [sys.executable, "-m", "dsv4ctl", "diagnose", "--json", str(log)]
    grep: list[float] = []
    diag: list[float] = []
    rss: list[int] = []
    _timed(cmd, workdir / "diagnose.json")  # untimed: writes the bytecode caches
    for _ in range(runs):  # alternating, so a busy moment of a shared machine slows both alike
        grep.append(_timed(grep_cmd, workdir / "grep.out", {**os.environ, "LC_ALL": "C"}))
        diag.append(_timed(cmd, workdir / "diagnose.json", rss=rss))
    doc = json.loads((workdir / "diagnose.json").read_text())
    autofit_to = (doc.get("autofit") or {}).get("to")
    result = {
        "mode": mode,
        "size_bytes": log.stat().st_size,
        "grep_s": round(statistics.median(grep), 3),
        "diagnose_s": round(statistics.median(diag), 3),
        "grep_lines": int((workdir / "grep.out").read_text().strip() or 0),
        "lines_selected": doc.get("lines_selected"),
        "verdict": doc.get("verdict"),
        "autofit_to": autofit_to,
        "peak_rss_mb": round(max(rss) / 1e6, 1),
        "load_1min": round(os.getloadavg()[0], 2),
    }
    result["ratio"] = round(result["diagnose_s"] / result["grep_s"], 2)
    result["target"] = TARGET[mode]
    result["ok"] = autofit_to == 980224 and result["ratio"] <= TARGET[mode] and result["peak_rss_mb"] <= RSS_TARGET_MB
    log.unlink()
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["serving", "engine25", "all"], default="all")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not GENERATOR.is_file():
        print(f"{GENERATOR} is not here (a clone without ../shared): nothing to measure", file=sys.stderr)
        return 1
    modes = ["serving", "engine25"] if a.mode == "all" else [a.mode]
    with tempfile.TemporaryDirectory(prefix="dsv4ctl-bench-") as tmp:
        results = [bench(m, a.runs, Path(tmp)) for m in modes]
    if a.json:
        print(json.dumps(results, indent=1))
    else:
        for r in results:
            print(f"{r['mode']:9s} grep {r['grep_s']:.2f} s  diagnose {r['diagnose_s']:.2f} s  {r['ratio']:.2f}x "
                  f"(target <= {r['target']}x)  peak RSS {r['peak_rss_mb']:.0f} MB (<= {RSS_TARGET_MB})  "
                  f"autofit.to={r['autofit_to']}  load {r['load_1min']}  {'ok' if r['ok'] else 'MISSED'}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
