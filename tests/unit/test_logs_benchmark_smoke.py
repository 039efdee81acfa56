"""The diagnose benchmark script still runs (on a few MB instead of 1 GiB) and cleans up after itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_benchmark_script_on_a_small_log(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "diagnose_bench.py"), "--size", "3MiB", "--engine", "both",
         "--dir", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["size_bytes"] >= 3 * 2**20
    assert data["grep"]["lines"] > 0
    assert data["engines"], "no engine ran"
    assert "dsv4ctl diagnose (auto)" in data["engines"]  # the command itself is timed too
    for result in data["engines"].values():
        assert result["lines"] == data["grep"]["lines"]  # same patterns, same lines
        assert result["verdict"] == "healthy"
        assert result["ratio_vs_grep"] > 0 and result["peak_rss_mib"] > 0
        assert result["tree_peak_processes"] >= 1 and result["tree_peak_rss_mib"] > 0
    assert data["log_deleted"] is True
    assert list(tmp_path.iterdir()) == []
