"""The README's commands run as printed (those that need no GPU, no checkpoint and start no server).

Each `dsv4ctl …` line of the README's bash blocks runs through a shell, in a directory that holds
the files the README names (vllm.log and last-start.log: a built-in example log; other-box.json: a
GPU snapshot; node-a.json and node-b.json: a snapshot per node; the Flash checkpoint in the Hugging Face cache, headers only). A command that runs
ends with a verdict (0, 3-7), never 1 (error) or 2 (usage).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fitkit import FLASH, builtin_config, make_checkpoint

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
SNAPSHOT = REPO / "tests" / "fixtures" / "gpus" / "h200-snapshot.json"
EXAMPLE_LOG = REPO / "dsv4ctl" / "examples" / "stale-max-model-len.log"
GiB = 1 << 30

# Lines that cannot run on a test box, and why.
NOT_HERE = {
    "dsv4ctl fit-length /models/DeepSeek-V4-Pro": "a local checkpoint dir and NVML",
    "--port 8000": "starts a server",
    "dsv4ctl gpus": "NVML",
    "dsv4ctl probe deepgemm": "a DeepGEMM (vLLM's vendored copy or deep_gemm); exit 1 'cannot tell' without one",
}
# Lines that import vLLM (seconds of CPU): the engine tier.
ENGINE = ("dsv4ctl serve", "dsv4ctl doctor")


def readme_commands() -> list[str]:
    text = README.read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line.startswith("dsv4ctl "):
                commands.append(line)
    return commands


def _runnable(command: str) -> bool:
    return not any(key in command for key in NOT_HERE)


def _params() -> list:
    params = []
    for command in readme_commands():
        if not _runnable(command):
            continue
        marks = [pytest.mark.engine] if command.startswith(ENGINE) else []
        params.append(pytest.param(command, marks=marks, id=command[:60]))
    return params


@pytest.fixture
def readme_dir(tmp_path, monkeypatch):
    shutil.copy(EXAMPLE_LOG, tmp_path / "vllm.log")
    shutil.copy(EXAMPLE_LOG, tmp_path / "last-start.log")
    shutil.copy(SNAPSHOT, tmp_path / "other-box.json")
    import json

    from fitkit import h200, snapshot

    for node in ("node-a", "node-b"):  # one 8-GPU snapshot per node of a two-node launch
        snap = snapshot(*(h200(i) for i in range(8)))
        (tmp_path / f"{node}.json").write_text(json.dumps({**snap.to_json(), "hostname": node}))
    # The node's Hugging Face cache holds the Flash checkpoint (safetensors headers, sparse data).
    hub = tmp_path / "hf" / "hub" / "models--deepseek-ai--DeepSeek-V4-Flash"
    make_checkpoint(hub / "snapshots" / "r1", builtin_config(FLASH),
                    [{"model.layers.0.attn.wq.weight": 10 * GiB, "model.layers.0.ffn.experts.0.w1.weight": 50 * GiB}])
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text("r1")
    return tmp_path


def test_the_readme_has_commands():
    commands = readme_commands()
    assert len(commands) >= 10
    assert any("fit-length" in c for c in commands) and any("diagnose" in c for c in commands)


@pytest.mark.parametrize("command", _params())
def test_readme_command_runs(command, readme_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        HF_HOME=str(readme_dir / "hf"),
        NO_COLOR="1",
    )
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=readme_dir, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode not in (1, 2, 127), f"{command}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr
