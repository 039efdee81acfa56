"""A look at `dsv4ctl serve`'s liveness route beside vLLM's own /health, and the exec probes, in one run.

Against a real `dsv4ctl serve` (vLLM's API server in serve's process): `--url URL` of one running here (its process
found by its port), or, without --url, one this script starts with the tiny Llama of the engine tests (dummy
weights, tests/tinymodel.py) and stops (its process group) at the end.

1. In-server cost. A bounded burst of `--looks` GET requests (500 by default), one after another over loopback,
   each on a new connection as kubelet's httpGet makes them, to `/dsv4ctl/livez` and then to vLLM's `/health` (the
   reference). The serve process's own CPU time (user + system, `psutil`; the engine core is another process) is
   read around each burst, less what the process spends idle (the judgement's updater, vLLM's own loops: measured
   over IDLE_S before, between and after the bursts). Per look: that CPU divided by the looks; the latency p50/p99
   of each request at the client.
2. Exec probes, `--runs` times each (30 by default), alternately: `curl -s -o /dev/null URL/health` and
   `python -m dsv4ctl check --once URL/dsv4ctl/livez` (the child's own CPU from `os.wait4`).

Prints one JSON document: the numbers, the ratios to the references measured in this run (liveness route to
/health; check --once to curl), and whether the targets hold: under 1 ms of server CPU per look at the route, under
0.15 s of CPU per `check --once` (p50).

    python benchmarks/probe_routes_bench.py [--url http://127.0.0.1:8000] [--looks 500] [--runs 30]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil

REPO = Path(__file__).resolve().parents[1]
ROUTE = "/dsv4ctl/livez"
TARGET_SERVER_CPU_S = 0.001  # a look at the route: under 1 ms of CPU in the server
TARGET_ONCE_CPU_S = 0.15  # `check --once`: under 0.15 s of CPU
IDLE_S = 5.0
START_TIMEOUT_S = 300


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def get(host: str, port: int, path: str) -> tuple[int, float]:
    started = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        response = conn.getresponse()
        response.read()
        return response.status, time.perf_counter() - started
    finally:
        conn.close()


def cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def idle_rate(proc: psutil.Process) -> float:
    before, started = cpu(proc), time.monotonic()
    time.sleep(IDLE_S)
    return (cpu(proc) - before) / (time.monotonic() - started)


def burst(proc: psutil.Process, host: str, port: int, path: str, looks: int, idle: float) -> dict[str, object]:
    statuses: set[int] = set()
    latencies = []
    before, started = cpu(proc), time.monotonic()
    for _ in range(looks):
        status, took = get(host, port, path)
        statuses.add(status)
        latencies.append(took)
    wall = time.monotonic() - started
    spent = cpu(proc) - before - idle * wall
    return {"path": path, "looks": looks, "statuses": sorted(statuses), "wall_s": round(wall, 3),
            "server_cpu_per_look_s": round(max(spent, 0.0) / looks, 6),
            "latency_s": {"p50": round(statistics.median(latencies), 5), "p99": round(percentile(latencies, 99), 5)}}


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    return time.monotonic() - start, usage.ru_utime + usage.ru_stime, os.waitstatus_to_exitcode(status)


def listener(port: int) -> psutil.Process:
    """The process that listens on the port: serve's own, where vLLM's API server runs."""
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            return psutil.Process(conn.pid)
    raise SystemExit(f"no process of this user listens on port {port}")


def start_serve(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    sys.path.insert(0, str(REPO / "tests"))
    import tinymodel

    model = tinymodel.write_llama(workdir / "llama")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DSV4CTL_"))}
    env.update(VLLM_HOST_IP="127.0.0.1", VLLM_NO_USAGE_STATS="1", HF_HUB_OFFLINE="1", NO_COLOR="1",
               VLLM_CACHE_ROOT=str(workdir / "cache"), PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "dsv4ctl", "serve", str(model), "--load-format", "dummy", "--enforce-eager",
            "--max-model-len", "1024", "--kv-cache-memory-bytes", "64M", "--log-file", str(workdir / "serve.log"),
            "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if get("127.0.0.1", port, ROUTE)[0] == 200:
                return proc, url
        except OSError:
            pass
        time.sleep(1)
    stop(proc)
    raise SystemExit(f"dsv4ctl serve did not become ready in {START_TIMEOUT_S} s (log: {workdir / 'serve.log'})")


def stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def measure(url: str, looks: int, runs: int) -> dict[str, object]:
    split = urlsplit(url)
    host, port = split.hostname or "127.0.0.1", split.port or 80
    proc = listener(port)
    curl = shutil.which("curl")
    if curl is None:
        raise SystemExit("curl is not installed: it is the exec probe's reference")
    idle = [idle_rate(proc)]
    route = burst(proc, host, port, ROUTE, looks, idle[0])
    idle.append(idle_rate(proc))
    health = burst(proc, host, port, "/health", looks, idle[1])
    idle.append(idle_rate(proc))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(REPO), NO_COLOR="1")
    commands = {"check_once_route": [sys.executable, "-m", "dsv4ctl", "check", "--once", url + ROUTE],
                "curl_health": [curl, "-s", "-o", "/dev/null", url + "/health"]}
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    codes: dict[str, set[int]] = {name: set() for name in commands}
    for argv in commands.values():
        timed(argv, env)  # untimed: bytecode written, caches warm
    for _ in range(runs):
        for name, argv in commands.items():
            wall, spent, code = timed(argv, env)
            rows[name].append((wall, spent))
            codes[name].add(code)
    execs = {name: {"wall_s": {"p50": round(statistics.median(w for w, _ in v), 4), "p99": round(percentile([w for w, _ in v], 99), 4)},
                    "cpu_s": {"p50": round(statistics.median(c for _, c in v), 4), "p99": round(percentile([c for _, c in v], 99), 4)},
                    "exit_codes": sorted(codes[name])} for name, v in rows.items()}

    def ratio(a: float, b: float) -> float:
        return round(a / max(b, 1e-6), 2)

    per_look = route["server_cpu_per_look_s"]
    once = execs["check_once_route"]["cpu_s"]["p50"]
    return {
        "url": url, "cpus": os.cpu_count(), "server_pid": proc.pid,
        "server_idle_cpu_per_s": [round(r, 5) for r in idle],
        "in_server": {"liveness_route": route, "vllm_health": health},
        "exec_probes": execs,
        "ratio_route_to_vllm_health": {
            "server_cpu_per_look": ratio(per_look, health["server_cpu_per_look_s"]),  # type: ignore[arg-type]
            "latency_p50": ratio(route["latency_s"]["p50"], health["latency_s"]["p50"]),  # type: ignore[index]
            "latency_p99": ratio(route["latency_s"]["p99"], health["latency_s"]["p99"]),  # type: ignore[index]
        },
        "ratio_check_once_to_curl": {"cpu_p50": ratio(once, execs["curl_health"]["cpu_s"]["p50"]),
                                     "wall_p50": ratio(execs["check_once_route"]["wall_s"]["p50"],
                                                       execs["curl_health"]["wall_s"]["p50"])},
        "targets": {"server_cpu_per_look_s": TARGET_SERVER_CPU_S, "check_once_cpu_s": TARGET_ONCE_CPU_S,
                    "route_under_target": per_look < TARGET_SERVER_CPU_S,  # type: ignore[operator]
                    "check_once_under_target": once < TARGET_ONCE_CPU_S},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a running dsv4ctl serve (default: start one with the tiny Llama)")
    parser.add_argument("--looks", type=int, default=500)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    if not 1 <= args.looks <= 10000 or not 1 <= args.runs <= 1000:
        raise SystemExit("--looks: from 1 to 10000; --runs: from 1 to 1000")
    if args.url:
        print(json.dumps(measure(args.url.rstrip("/"), args.looks, args.runs), indent=2))
        return
    with tempfile.TemporaryDirectory(prefix="probe-bench-") as tmp:
        proc, url = start_serve(Path(tmp))
        try:
            print(json.dumps(measure(url, args.looks, args.runs), indent=2))
        finally:
            stop(proc)


if __name__ == "__main__":
    main()
