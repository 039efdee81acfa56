"""`dsv4ctl check` against a live server, beside `curl -s /health` in the same run.

Starts the tiny generated Llama (dummy weights) through `dsv4ctl serve` on 127.0.0.1 (or uses --url),
then runs, alternately, 20 times each:
- `python -m dsv4ctl check URL --window W --json` (a new interpreter each time, as a probe runs it);
- `curl -s URL/health` (the reference: what an httpGet probe costs);
and the look alone in this process (`check_group`, no interpreter start). Wall time is the command's
(monotonic clock); CPU time is the child's user + system time (getrusage of the reaped child).

Prints one JSON document: medians, check's wall time beyond its window, and the ratios to curl. The
window is idle time by design (two /metrics scrapes W seconds apart); the figure to watch is what check
costs beyond it. Run it alone, it starts a server:
    flock /tmp/team/engine.lock .venv/bin/python benchmarks/check_bench.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import tinymodel  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, child CPU s, exit code) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.returncode


def start_server(tmp: Path, port: int) -> subprocess.Popen:
    model = tinymodel.write_llama(tmp / "llama")
    env = {**os.environ, "VLLM_HOST_IP": "127.0.0.1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
           "HF_HUB_OFFLINE": "1", "VLLM_CACHE_ROOT": str(tmp / "cache"), "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "dsv4ctl", "serve", str(model), "--load-format", "dummy", "--enforce-eager",
            "--max-model-len", "1024", "--kv-cache-memory-bytes", "64M", "--log-file", str(tmp / "serve.log"),
            "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=open(tmp / "serve.out", "wb"), stderr=open(tmp / "serve.err", "wb"))  # noqa: SIM115
    deadline = time.monotonic() + 420
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited {proc.returncode}; see {tmp / 'serve.err'}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("not ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="an already running vLLM server (default: start the tiny one)")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--window", type=float, default=1.0)
    args = parser.parse_args()
    curl = shutil.which("curl")
    if curl is None:
        raise SystemExit("curl is not installed: it is the reference")
    tmp = Path(tempfile.mkdtemp(prefix="check-bench-"))
    proc = None
    if args.url:
        url = args.url.rstrip("/")
    else:
        port = free_port()
        proc = start_server(tmp, port)
        url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    check_argv = [sys.executable, "-m", "dsv4ctl", "check", url, "--window", f"{args.window:g}", "--json"]
    curl_argv = [curl, "-s", "-o", "/dev/null", f"{url}/health"]
    rows: dict[str, list[tuple[float, float]]] = {"check": [], "curl": [], "look_in_process": []}
    codes = []
    try:
        from dsv4ctl.check.http import check_group

        for _ in range(args.runs):
            wall, cpu, code = timed(check_argv, env)
            rows["check"].append((wall, cpu))
            codes.append(code)
            wall, cpu, _ = timed(curl_argv, env)
            rows["curl"].append((wall, cpu))
            cpu0, t0 = time.process_time(), time.monotonic()
            check_group([url], window_s=args.window)
            rows["look_in_process"].append((time.monotonic() - t0, time.process_time() - cpu0))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
    med = {k: {"wall_s": round(statistics.median(w for w, _ in v), 4), "cpu_s": round(statistics.median(c for _, c in v), 4)}
           for k, v in rows.items()}
    print(json.dumps({
        "runs": args.runs,
        "window_s": args.window,
        "url": url,
        "check_exit_codes": sorted(set(codes)),
        "median": med,
        "check_wall_beyond_window_s": round(med["check"]["wall_s"] - args.window, 4),
        "check_max_wall_s": round(max(w for w, _ in rows["check"]), 4),
        "bound_s": args.window + 2.0,
        "ratio_check_to_curl": {"wall": round(med["check"]["wall_s"] / med["curl"]["wall_s"], 1),
                                "cpu": round(med["check"]["cpu_s"] / max(med["curl"]["cpu_s"], 1e-6), 1)},
        "cpu": os.cpu_count(),
    }, indent=2))


if __name__ == "__main__":
    main()
