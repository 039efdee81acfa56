"""`dsv4ctl check --once` as an exec liveness probe runs it, beside `curl` and a bare interpreter, in one run.

A loopback stand-in server (the standard library's `http.server`, answering GET /health with an empty 200, as
vLLM's route does) is started in this process; then, alternately, `--runs` times each (30 by default):
- `python -m dsv4ctl check --once URL` (a new interpreter each time, as kubelet's exec runs it);
- `curl -s -o /dev/null URL/health` (what an httpGet probe costs, near enough);
- `python -c pass` (the interpreter's own start: the floor of any Python probe);
- `check --once URL --api-key unused`, a command line the fast path leaves to the Typer app: the same look
  after Typer's, Rich's and pydantic's imports (what the trimmed start saves).
CPU time is the child's user + system time (`os.wait4`'s rusage of that child alone); wall time is the
monotonic clock around it. Prints one JSON document: p50 and p99 of each, the ratios of check --once to curl
and to the bare interpreter, and whether check --once's p50 CPU is under the issue's target (0.15 s).

    python benchmarks/check_once_bench.py [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_CPU_S = 0.15  # issue 33: `check --once` under 0.15 s of CPU


class Health(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:  # quiet
        pass


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, CPU s of this child, exit code)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (p99 of 30 runs is the slowest)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    if not 1 <= args.runs <= 1000:
        raise SystemExit("--runs: from 1 to 1000")
    curl = shutil.which("curl")
    if curl is None:
        raise SystemExit("curl is not installed: it is the reference")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    # As installed: bytecode written (an untimed run first), colour off, dsv4ctl from this tree.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(REPO), NO_COLOR="1")
    commands = {
        "check_once": [sys.executable, "-m", "dsv4ctl", "check", "--once", url],
        # The same look through the Typer app (an option the fast path leaves to it): what trimming the start saved.
        "check_once_through_typer": [sys.executable, "-m", "dsv4ctl", "check", "--once", url, "--api-key", "unused"],
        "curl": [curl, "-s", "-o", "/dev/null", f"{url}/health"],
        "python_pass": [sys.executable, "-c", "pass"],
    }
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    codes: dict[str, set[int]] = {name: set() for name in commands}
    try:
        for argv in commands.values():
            timed(argv, env)
        for _ in range(args.runs):
            for name, argv in commands.items():
                wall, cpu, code = timed(argv, env)
                rows[name].append((wall, cpu))
                codes[name].add(code)
    finally:
        server.shutdown()
        server.server_close()
    stats = {name: {"wall_s": {"p50": round(statistics.median(w for w, _ in v), 4), "p99": round(percentile([w for w, _ in v], 99), 4)},
                    "cpu_s": {"p50": round(statistics.median(c for _, c in v), 4), "p99": round(percentile([c for _, c in v], 99), 4)},
                    "exit_codes": sorted(codes[name])}
             for name, v in rows.items()}
    once, curl_s, bare = stats["check_once"], stats["curl"], stats["python_pass"]

    def ratio(a: float, b: float) -> float:
        return round(a / max(b, 1e-4), 1)

    print(json.dumps({
        "runs": args.runs,
        "url": url,
        "cpus": os.cpu_count(),
        "stats": stats,
        "ratio_check_once_to_curl": {"wall_p50": ratio(once["wall_s"]["p50"], curl_s["wall_s"]["p50"]),
                                     "cpu_p50": ratio(once["cpu_s"]["p50"], curl_s["cpu_s"]["p50"])},
        "ratio_check_once_to_python_pass": {"wall_p50": ratio(once["wall_s"]["p50"], bare["wall_s"]["p50"]),
                                            "cpu_p50": ratio(once["cpu_s"]["p50"], bare["cpu_s"]["p50"])},
        "check_once_beyond_python_cpu_p50_s": round(once["cpu_s"]["p50"] - bare["cpu_s"]["p50"], 4),
        "target_cpu_s": TARGET_CPU_S,
        "under_target": once["cpu_s"]["p50"] < TARGET_CPU_S and once["cpu_s"]["p99"] < TARGET_CPU_S,
    }, indent=2))


if __name__ == "__main__":
    main()
