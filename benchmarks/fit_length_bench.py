"""How fast `fit-length` answers: in-process plan_fit, and a whole CLI process (no vLLM, torch or NVML).

    .venv/bin/python benchmarks/fit_length_bench.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from dsv4ctl.planning import FitRequest, plan_fit

GiB = 1 << 30


def main() -> None:
    cases = [
        ("Flash 9.81 GiB", FitRequest(model="deepseek-ai/DeepSeek-V4-Flash", kv_cache_memory_bytes=int(9.81 * GiB))),
        ("Pro 24 GiB, PP=4", FitRequest(model="deepseek-ai/DeepSeek-V4-Pro", kv_cache_memory_bytes=24 * GiB, pipeline_parallel_size=4)),
    ]
    for label, request in cases:
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            plan_fit(request)
            times.append(time.perf_counter() - t0)
        print(f"plan_fit {label}: median {statistics.median(times) * 1000:.1f} ms")
    argv = [sys.executable, "-m", "dsv4ctl", "fit-length", "deepseek-ai/DeepSeek-V4-Flash", "--kv-cache-memory", "9.81GiB", "--json"]
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
    print(f"CLI process (fit-length --json): median {statistics.median(walls) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
