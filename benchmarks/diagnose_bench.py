#!/usr/bin/env python3
"""Benchmark `dsv4ctl diagnose` on big generated logs against `LC_ALL=C grep -c -E` with the same patterns.

    python benchmarks/diagnose_bench.py                          # the three production-like logs, 1 GiB each
    python benchmarks/diagnose_bench.py --log serving --engine both
    python benchmarks/diagnose_bench.py --size 3MiB --json       # a quick run (the test suite's smoke test)

Logs (`--log`, default `all` = the first three; see benchmarks/prodlogs.py for what they hold and where
every line format comes from):
- `serving`: a server that ran for days: a startup, serving traffic with ~1 % request-time ERROR
  tracebacks, access and throughput lines, a restart with an auto-fit reduction at the bottom;
- `crash-loop`: hundreds of failed starts per GiB, each with its traceback;
- `engine-lines`: the serving log with a quarter of its lines EngineCore ERROR lines;
- `noise`: the original benchmark log: the `healthy` startup followed by serving noise with almost
  nothing interesting (uvicorn access lines, engine metrics, request logs, a warning every 256 MiB).
Each log is written to a temporary file, measured, and deleted before the next one is written.

Each measured command runs in its own process after one untimed warm-up read of the file, so the
page cache is warm for all of them. Reported per log and engine: wall seconds, the ratio to grep's wall
seconds in the same run (lower is better; 1.0 = as fast as grep), peak RSS, and the number of lines
selected (which must equal grep's count: same patterns, same lines). Timed: the command itself
(`python -m dsv4ctl diagnose LOG --json`, the default install's engine) and, with `--engine`,
`diagnose()` through the Python API with each engine. A big file is scanned by several processes
(`dsv4ctl.logs.parallel`), so RSS is reported two ways: `peak_rss_mib`, the largest single process
(exact, from wait4's rusage of the diagnosing process, which covers its waited children),
`tree_peak_rss_mib`, the sum over the whole process tree sampled every 20 ms with psutil (pages a
forked child shares with its parent are counted in both), and `tree_peak_pss_mib`, the same sum of
PSS (shared pages divided among the processes that share them: what the tree really holds).
`--sequential-too` also times the one-process scan.
Run it under `flock /tmp/dsv4ctl-heavy.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import prodlogs  # noqa: E402 - benchmarks/prodlogs.py, next to this script
from dsv4ctl.logs import prefilter  # noqa: E402
from dsv4ctl.units import parse_size  # noqa: E402

NOISE = [
    '(APIServer pid=7701) INFO:     10.0.{a}.{b}:5{c:04d} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n',
    "(APIServer pid=7701) INFO 10-21 11:{m:02d}:{s:02d} [loggers.py:259] Engine 000: Avg prompt throughput: {t}.4 tokens/s, "
    "Avg generation throughput: {g}.0 tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: {u}.4%, "
    "Prefix cache hit rate: 41.0%\n",
    "(APIServer pid=7701) INFO 10-21 11:{m:02d}:{s:02d} [logger.py:49] Received request chatcmpl-{a}{b}{c}: prompt: "
    "'<|User|>Summarise the attached report in three bullet points.<|Assistant|>', params: SamplingParams(n=1, "
    "temperature=0.6, top_p=0.95, max_tokens=2048), lora_request: None.\n",
    "(APIServer pid=7701) INFO 10-21 11:{m:02d}:{s:02d} [engine.py:331] Added request chatcmpl-{a}{b}{c}.\n",
    "(APIServer pid=7701) WARNING 10-21 11:{m:02d}:{s:02d} [protocol.py:120] The following fields were present in the "
    "request but ignored: {{'stream_options'}}\n",
]
AFTER_STARTUP_ERROR = (
    "(Worker_TP0 pid=7811) WARNING 10-21 12:00:00 [gpu_model_runner.py:2201] Preempted {n} requests; "
    "consider raising --gpu-memory-utilization\n"
)


def generate(path: Path, size: int) -> int:
    """Write the benchmark log; returns its size in bytes."""
    head = (REPO / "dsv4ctl" / "examples" / "healthy.log").read_bytes()
    # Keep the startup, drop the shutdown tail so the serving noise follows the ready line.
    head = head[: head.index(b"[shutdown]")]
    head = head[: head.rindex(b"\n") + 1]
    block = []
    i = 0
    while sum(map(len, block)) < (1 << 20):
        tmpl = NOISE[i % len(NOISE)] if i % 97 else NOISE[4]
        block.append(tmpl.format(a=i % 250, b=(i * 7) % 250, c=i % 10000, m=(i // 60) % 60, s=i % 60, t=i % 900, g=i % 90, r=i % 64, u=i % 90).encode())
        i += 1
    chunk = b"".join(block)
    written = 0
    with open(path, "wb") as out:
        out.write(head)
        written += len(head)
        n = 0
        while written < size:
            out.write(chunk)
            written += len(chunk)
            n += 1
            if n % 256 == 0:
                line = AFTER_STARTUP_ERROR.format(n=n).encode()
                out.write(line)
                written += len(line)
    return written


DIAGNOSE_SNIPPET = """
import json, resource, sys, time
t = time.perf_counter()
from dsv4ctl.advice import diagnose
d = diagnose([sys.argv[1]], engine=sys.argv[2])
elapsed = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"seconds_inside": elapsed, "peak_rss_bytes": rss, "children_peak_rss_bytes": children,
                  "lines": d.lines_selected, "verdict": d.verdict, "findings": [f.id for f in d.findings]}))
"""


class TreeRss:
    """Samples the summed RSS and PSS of a process and all its descendants every few milliseconds (psutil).

    RSS counts a page shared by a parent and its forked children in each of them; PSS (proportional set
    size, Linux) divides it among them, so its sum is the memory the tree really holds."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        import psutil

        self.psutil = psutil
        self.root = psutil.Process(pid)
        self.interval = interval
        self.peak = 0
        self.peak_pss = 0
        self.peak_processes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        psutil = self.psutil
        while not self.stop.is_set():
            try:
                procs = [self.root] + self.root.children(recursive=True)
            except psutil.Error:
                return
            total = pss = 0
            for p in procs:
                try:
                    total += p.memory_info().rss
                    pss += getattr(p.memory_full_info(), "pss", 0)
                except psutil.Error:
                    pass
            if total > self.peak:
                self.peak, self.peak_processes = total, len(procs)
            self.peak_pss = max(self.peak_pss, pss)
            self.stop.wait(self.interval)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join()


def _measure(cmd: list[str], env: dict[str, str]) -> tuple[str, int, float, int, int, int, int]:
    """Run `cmd`; returns (stdout, exit code, wall seconds, largest RSS of it and its waited children in
    bytes (wait4), sampled peak of the process tree's summed RSS, processes in the tree at that peak,
    sampled peak of the tree's summed PSS)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=REPO, env=env)
    sampler = TreeRss(proc.pid)
    out = proc.stdout.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()  # type: ignore[union-attr]
    sampler.finish()
    return out, proc.returncode, wall, usage.ru_maxrss * 1024, sampler.peak, sampler.peak_processes, sampler.peak_pss


def run_diagnose(path: Path, engine: str, workers: int | None = None) -> dict:
    """`diagnose()` through the Python API, with a chosen engine (the CLI always takes "auto")."""
    env = dict(os.environ)
    if workers is not None:
        env["DSV4CTL_DIAGNOSE_WORKERS"] = str(workers)
    out, code, wall, maxrss, tree, procs, pss = _measure([sys.executable, "-c", DIAGNOSE_SNIPPET, str(path), engine], env)
    if code != 0:
        raise SystemExit(f"diagnose failed with exit code {code}")
    data = json.loads(out.strip().splitlines()[-1])
    data.update(seconds=wall, wait4_peak_rss_bytes=maxrss, tree_peak_rss_bytes=tree, tree_peak_processes=procs,
                tree_peak_pss_bytes=pss)
    return data


def run_cli(path: Path) -> dict:
    """The command itself, `python -m dsv4ctl diagnose LOG --json` (Typer, Rich, JSON output included)."""
    out, code, wall, maxrss, tree, procs, pss = _measure(
        [sys.executable, "-m", "dsv4ctl", "diagnose", str(path), "--json"], dict(os.environ)
    )
    data = json.loads(out)
    if code != data["exit_code"]:
        raise SystemExit(f"dsv4ctl diagnose exited {code}, its JSON says {data['exit_code']}")
    return {
        "seconds": wall, "seconds_inside": None, "wait4_peak_rss_bytes": maxrss, "peak_rss_bytes": None,
        "children_peak_rss_bytes": None, "tree_peak_rss_bytes": tree, "tree_peak_processes": procs,
        "tree_peak_pss_bytes": pss,
        "lines": data["lines_selected"], "verdict": data["verdict"], "findings": [f["id"] for f in data["findings"]],
    }


def run_grep(path: Path, mode: str = "-c") -> tuple[float, int]:
    """`LC_ALL=C grep -c -E` (mode "-c") or `grep -n -E` (mode "-n", numbers lines like diagnose does)."""
    grep = shutil.which("grep")
    if grep is None:
        raise SystemExit("grep not found")
    args = [grep, mode, "-E"] + [x for p in prefilter.PATTERNS for x in ("-e", p)] + [str(path)]
    env = {**os.environ, "LC_ALL": "C"}
    start = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, env=env).stdout
    elapsed = time.perf_counter() - start
    count = int(out.strip() or 0) if mode == "-c" else len(out.splitlines())
    return elapsed, count


LOGS = ("serving", "crash-loop", "engine-lines", "noise")


def bench_log(log: str, path: Path, size: int, engines: list[str], sequential_too: bool) -> dict:
    """Write one log to `path`, time grep and diagnose on it; returns its results."""
    t0 = time.perf_counter()
    if log == "noise":
        made = {"bytes": generate(path, size)}
    else:
        made = prodlogs.write(log, path, size)
    gen_seconds = time.perf_counter() - t0
    run_grep(path)  # warm the page cache (untimed)
    grep_seconds, grep_count = run_grep(path)
    grep_n_seconds, _ = run_grep(path, "-n")
    results = {
        "size_bytes": made["bytes"],
        "made_of": made,
        "generate_seconds": round(gen_seconds, 2),
        "grep": {"seconds": round(grep_seconds, 3), "lines": grep_count},
        "grep_n": {"seconds": round(grep_n_seconds, 3)},
        "engines": {},
    }
    runs: list[tuple[str, int | None]] = [("cli", None)] + [(e, None) for e in engines]
    runs += [(e, 1) for e in engines] if sequential_too else []
    mib = lambda b: None if b is None else round(b / (1 << 20), 1)  # noqa: E731
    for engine, workers in runs:
        r = run_cli(path) if engine == "cli" else run_diagnose(path, engine, workers)
        key = "dsv4ctl diagnose (auto)" if engine == "cli" else engine if workers is None else f"{engine}, 1 process"
        results["engines"][key] = {
            "seconds": round(r["seconds"], 3),
            "seconds_inside": None if r["seconds_inside"] is None else round(r["seconds_inside"], 3),
            "ratio_vs_grep": round(r["seconds"] / grep_seconds, 3) if grep_seconds > 0 else None,
            "ratio_vs_grep_n": round(r["seconds"] / grep_n_seconds, 3) if grep_n_seconds > 0 else None,
            # Largest single process (the diagnosing one or any of its scanning children): exact,
            # from wait4's rusage of the diagnosing process (which includes its waited children), not a sum.
            "peak_rss_mib": mib(r["wait4_peak_rss_bytes"]),
            "parent_peak_rss_mib": mib(r["peak_rss_bytes"]),
            "children_peak_rss_mib": mib(r["children_peak_rss_bytes"]),
            # Sum over the whole process tree, sampled every 20 ms with psutil (may miss a shorter
            # peak; counts pages shared between a parent and its forked children twice).
            "tree_peak_rss_mib": mib(r["tree_peak_rss_bytes"]),
            "tree_peak_pss_mib": mib(r["tree_peak_pss_bytes"]),
            "tree_peak_processes": r["tree_peak_processes"],
            "lines": r["lines"],
            "lines_match_grep": r["lines"] == grep_count,
            "verdict": r["verdict"],
            "findings": r["findings"],
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", choices=LOGS + ("all",), default="all",
                        help="which log (default all: serving, crash-loop, engine-lines)")
    parser.add_argument("--size", default="1GiB", help="size of each log (default 1GiB)")
    parser.add_argument("--engine", choices=["none", "auto", "hyperscan", "re", "both"], default="none",
                        help="also time diagnose() through the Python API with this engine (both: hyperscan and re)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where to write the logs (default /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the generated logs")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--sequential-too", action="store_true",
                        help="also time each API engine with DSV4CTL_DIAGNOSE_WORKERS=1 (one process)")
    args = parser.parse_args(argv)

    size = parse_size(args.size)
    engines = {"none": [], "both": ["hyperscan", "re"]}.get(args.engine, [args.engine])
    if "hyperscan" in engines and not prefilter.hyperscan_available():
        engines = [e for e in engines if e != "hyperscan"] or ["re"]
    logs = LOGS[:3] if args.log == "all" else (args.log,)
    results: dict = {"patterns": len(prefilter.PATTERNS), "hyperscan": prefilter.hyperscan_available(), "logs": {}}
    paths: list[Path] = []
    for log in logs:
        fd, name = tempfile.mkstemp(prefix=f"dsv4ctl-bench-{log}-", suffix=".log", dir=args.dir)
        os.close(fd)
        path = Path(name)
        paths.append(path)
        try:
            results["logs"][log] = bench_log(log, path, size, engines, args.sequential_too)
        finally:
            if not args.keep:
                path.unlink(missing_ok=True)
        results["logs"][log]["log_path"] = str(path)
    results["logs_deleted"] = not any(p.exists() for p in paths)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"{len(prefilter.PATTERNS)} patterns, hyperscan {'installed' if results['hyperscan'] else 'not installed'}")
        for log, res in results["logs"].items():
            g = res["grep"]
            print(f"\n[{log}] {res['size_bytes'] / (1 << 30):.2f} GiB ({res['size_bytes']:,} bytes), made of "
                  + ", ".join(f"{k} {v:,}" for k, v in res["made_of"].items() if k != "bytes"))
            print(f"  grep -c -E: {g['seconds']:.2f} s, {g['lines']:,} lines; grep -n -E: {res['grep_n']['seconds']:.2f} s")
            for engine, r in res["engines"].items():
                print(
                    f"  {engine}: {r['seconds']:.2f} s = {r['ratio_vs_grep']:.2f}x grep, "
                    f"peak RSS {r['peak_rss_mib']:.0f} MiB (largest process), {r['tree_peak_rss_mib']:.0f} MiB "
                    f"(process tree, sampled; PSS {r['tree_peak_pss_mib']:.0f} MiB), {r['lines']:,} lines "
                    f"({'same as grep' if r['lines_match_grep'] else 'DIFFERENT from grep'}), verdict {r['verdict']}"
                )
    ok = True
    for res in results["logs"].values():
        ok = ok and all(r["lines_match_grep"] for r in res["engines"].values())
        ok = ok and len({(r["verdict"], tuple(r["findings"])) for r in res["engines"].values()}) == 1
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
