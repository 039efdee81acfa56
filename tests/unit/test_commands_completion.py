"""Shell completion through Typer's own mechanism: example names and model presets complete."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dsv4ctl.logs.examples import list_examples
from dsv4ctl.planning.checkpoint.geometry import builtin_model_ids


def _complete(words: str, cword: int) -> list[str]:
    env = {**os.environ, "_DSV4CTL_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    code = "import sys; from dsv4ctl.cli import main; sys.exit(main())"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_example_names_complete():
    names = [e.name for e in list_examples()]
    assert _complete("dsv4ctl diagnose --example ", 3) == names
    first = names[0]
    assert _complete(f"dsv4ctl diagnose --example {first[:4]}", 3) == [n for n in names if n.startswith(first[:4])]


def test_model_presets_complete():
    assert _complete("dsv4ctl fit-length deepseek-ai/", 2) == builtin_model_ids()
    assert _complete("dsv4ctl fit-length deepseek-ai/DeepSeek-V4-P", 2) == ["deepseek-ai/DeepSeek-V4-Pro"]


def test_subcommands_complete():
    assert {"diagnose", "fit-length", "serve", "gpus", "doctor", "probe"} <= set(_complete("dsv4ctl ", 1))


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_show_completion_prints_typers_script(shell):
    proc = subprocess.run([sys.executable, "-m", "dsv4ctl", "--show-completion", shell], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "_DSV4CTL_COMPLETE" in proc.stdout and "dsv4ctl" in proc.stdout
